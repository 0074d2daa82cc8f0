"""Tools around the job: bench, packaging for spark-submit, the effective configuration."""
