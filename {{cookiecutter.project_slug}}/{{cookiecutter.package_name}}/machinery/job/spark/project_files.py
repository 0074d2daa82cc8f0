"""Files the job reads from the project folder beside the package (log4j2.properties, ivysettings.xml)."""

from __future__ import annotations

from pathlib import Path

# The project folder: <project>/<package>/machinery/job/spark/project_files.py.
PROJECT_DIR = Path(__file__).resolve().parents[3]


def project_file(name: str) -> Path | None:
    """The working directory's file of that name, else the project folder's; None when neither has it
    (a package installed or shipped without its project)."""
    for folder in (Path.cwd(), PROJECT_DIR):
        if (folder / name).is_file():
            return folder / name
    return None
