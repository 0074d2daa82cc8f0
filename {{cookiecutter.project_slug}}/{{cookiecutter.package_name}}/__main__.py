"""`python -m {{ cookiecutter.package_name }} <command>`."""

from .cli import main

raise SystemExit(main())
