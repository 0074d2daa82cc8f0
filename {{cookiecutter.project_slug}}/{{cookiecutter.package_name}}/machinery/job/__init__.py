"""The job: the Spark session, sources and sinks, the runner, the guard's policy, progress, stopping and the watchdog."""
