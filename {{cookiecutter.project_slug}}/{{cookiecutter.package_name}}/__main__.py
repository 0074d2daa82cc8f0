"""`python -m {{ cookiecutter.package_name }} <command>`: the machinery's command line."""

from .machinery.cli import main

raise SystemExit(main())
