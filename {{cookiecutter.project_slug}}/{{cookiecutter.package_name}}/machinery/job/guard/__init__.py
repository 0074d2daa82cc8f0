"""The guard, before a start: settings drift, the state key and the state's fit, schema evolution, the output and the state checks, the real-time slots; uses spark/, endpoints/ and plan/."""
