"""What spark-submit needs to run this job on a cluster: the package zipped for --py-files, and the
command line that ships it with settings.yaml (--files) and fetches the connector JARs (--packages,
through the project's ivysettings.xml).

Only the driver reads settings.yaml; --files also puts a copy in each executor's working directory.
In client mode the driver reads it where it is; in cluster mode Spark localizes it into the driver's
working directory under its own name, so the command passes that name.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

# The whole package: the query module and this machinery (two levels up from this file).
PACKAGE_DIR = Path(__file__).resolve().parents[2]
DEPLOY_MODES = ("client", "cluster")
# What a cluster never runs: development tools (the local Kafka broker, bench and its scratch runs) and the
# tests' surface.
DEVELOPMENT_ONLY = (
    "machinery/operations/local_kafka.py",
    "machinery/operations/bench.py",
    "machinery/operations/bench_run.py",
    "machinery/operations/bench_report.py",
    "machinery/operations/scratch_run.py",
    "machinery/operations/store_configurations.py",
    "machinery/testing.py",
)


def build_py_files(out_dir: Path) -> Path:
    """Zip this package (its .py files but the development-only ones) into out_dir for
    `spark-submit --py-files`; return the zip."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{PACKAGE_DIR.name}.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(PACKAGE_DIR.rglob("*.py")):
            if path.relative_to(PACKAGE_DIR).as_posix() not in DEVELOPMENT_ONLY:
                archive.write(path, path.relative_to(PACKAGE_DIR.parent))
    return target


def submit_command(
    master: str, deploy_mode: str, py_files: Path, settings_file: Path, fetch_arguments: list[str]
) -> list[str]:
    """The spark-submit command that runs main.py on `master` with these files."""
    if deploy_mode not in DEPLOY_MODES:
        raise ValueError(f"deploy mode must be client or cluster, got {deploy_mode!r}")
    command = ["spark-submit", "--master", master, "--deploy-mode", deploy_mode]
    command += ["--py-files", str(py_files), "--files", str(settings_file)]
    command += fetch_arguments
    driver_settings = settings_file if deploy_mode == "client" else Path(settings_file.name)
    return [*command, "main.py", "--settings", str(driver_settings)]
