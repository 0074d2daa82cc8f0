"""The guard, before a start: settings drift, the state key and the state's fit, schema evolution, the output and the state checks, real time's checks; uses spark/, plan/ and endpoints/."""
