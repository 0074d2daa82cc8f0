"""The checkpoint: the guard against drift, the state key record, and inspect."""
