"""{{ cookiecutter.project_slug }}: a stateful Spark Structured Streaming job."""

__version__ = "0.1.0"
