"""Running the query: the runner, the Python its operators need, the progress lines and the watchdog, stopping on a batch boundary, the lines a failed run ends with; uses every wing below."""
