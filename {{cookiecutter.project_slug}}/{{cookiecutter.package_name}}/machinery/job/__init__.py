"""The job, in wings that each use only the wings below them and core/: spark, endpoints, plan, guard, run."""
