"""Entry point: `spark-submit main.py [--settings PATH] [--max-batches N] [--timeout SECONDS]`.

`python main.py ...` and `python -m {{ cookiecutter.package_name }} run ...` do the same.
"""

import sys

from {{ cookiecutter.package_name }}.machinery.commands import main

if __name__ == "__main__":
    raise SystemExit(main(["run", *sys.argv[1:]]))
