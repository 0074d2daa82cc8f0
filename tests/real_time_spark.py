"""The pyspark the real-time proofs run on (Spark 4.3: its real-time mode runs stateful queries), made once.

CI runs everything else on the pyspark that pyproject.toml pins (4.2.1, where the delta-spark writer
has its build). The real-time bake's proofs run on pyspark 4.3.0 instead, in a virtual environment of
its own under build/ that holds that pyspark alone and reads every other package from .venv (a .pth
file after its own site-packages, so its pyspark comes first): seconds to make from pip's cache, where a
whole environment of the project's dependencies takes minutes.

    .venv/bin/python tests/real_time_spark.py     # make test runs it (its `real-time-spark` step)
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[1]
PYSPARK = "4.3.0"
VENV = TEMPLATE / "build" / f"venv-pyspark-{PYSPARK}-over-venv"
PYTHON = VENV / "bin" / "python"


def installed() -> bool:
    found = subprocess.run([str(PYTHON), "-c", "import pyspark; print(pyspark.__version__)"], capture_output=True)
    return found.returncode == 0 and found.stdout.decode().strip() == PYSPARK


def main() -> None:
    if PYTHON.exists() and installed():
        print(f"real-time spark: {VENV} has pyspark {PYSPARK}")
        return
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    subprocess.run([str(PYTHON), "-m", "pip", "install", "-q", "--no-deps", f"pyspark=={PYSPARK}"], check=True)
    own = subprocess.run(
        [str(PYTHON), "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # Every other package from this environment, after the new one's own: its pyspark shadows .venv's.
    (Path(own) / "template-venv.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    if not installed():
        raise SystemExit(f"real-time spark: {PYTHON} does not import pyspark {PYSPARK}")
    print(f"real-time spark: made {VENV} (pyspark {PYSPARK} over {sys.prefix})")


def run_script_on_it(script: str) -> None:
    """Run `script` (a benchmark's __file__) again under this pyspark, made first where missing, with the same
    arguments, unless the running pyspark is this one."""
    import pyspark

    if pyspark.__version__ == PYSPARK:
        return
    main()
    print(f"pyspark {pyspark.__version__} here: running under {PYTHON} (pyspark {PYSPARK})", flush=True)
    os.execv(PYTHON, [str(PYTHON), script, *sys.argv[1:]])


if __name__ == "__main__":
    main()
