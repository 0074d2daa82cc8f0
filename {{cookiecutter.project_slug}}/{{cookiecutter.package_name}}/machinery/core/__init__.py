"""The core: settings, durations, the operator catalogue, the sizing arithmetic, reading a checkpoint's files.
No Spark: the bake loads parts of it, and every layer above builds on it."""
