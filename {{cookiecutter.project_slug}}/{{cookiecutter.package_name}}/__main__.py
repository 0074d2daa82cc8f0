"""`python -m {{ cookiecutter.package_name }} <command>`: the machinery's command line."""

from .machinery.commands import main

raise SystemExit(main())
