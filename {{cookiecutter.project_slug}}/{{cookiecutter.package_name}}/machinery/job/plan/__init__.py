"""Reading the query: its plan's text, its stateful operators and what Spark refuses of them, the MERGE key and the table it MERGEs into, a processor's declared state; uses spark/ and endpoints/."""
