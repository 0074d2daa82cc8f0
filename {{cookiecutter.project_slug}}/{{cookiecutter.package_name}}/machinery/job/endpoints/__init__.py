"""Where events come from and where results go: sources, sinks, sample input, reading output back; uses spark/."""
