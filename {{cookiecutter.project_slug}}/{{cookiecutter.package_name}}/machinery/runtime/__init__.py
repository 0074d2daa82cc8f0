"""The Spark job at run time: session, the query loop, progress and the state watchdog."""
