"""Reaching Spark: the session, Spark Connect, the driver JVM, Java, the connector JARs, Spark's errors, the heap, the checkpoint's files through the session; uses core/ alone."""
