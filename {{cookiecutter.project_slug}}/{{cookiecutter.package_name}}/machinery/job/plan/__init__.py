"""Reading the query: its plan's text, its stateful operators, the MERGE key, a processor's declared state; uses spark/."""
