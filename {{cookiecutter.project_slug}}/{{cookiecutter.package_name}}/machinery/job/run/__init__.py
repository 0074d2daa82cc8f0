"""Running the query: the runner, the progress lines and the watchdog, stopping on a batch boundary; uses every wing below."""
