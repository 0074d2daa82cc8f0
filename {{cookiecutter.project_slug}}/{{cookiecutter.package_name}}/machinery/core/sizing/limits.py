"""The sizing's bounds: the largest value each input may take, and the heap per partition at which the
state goes to RocksDB.

Standard library only: the bake checks its answers against MAXIMA (hooks/answers.py).
"""

from __future__ import annotations

from .memory import GIB

# At or above this heap per partition (growth included) on the HDFS-backed store, the state goes to RocksDB.
ROCKSDB_THRESHOLD_BYTES = GIB
JAVA_INT = 2**31 - 1
# The largest value of each sizing input: far above any real job (a larger one is a typo), so that the
# arithmetic stays finite, and within the Java int Spark reads a count as. The settings and the bake's
# answers refuse more.
MAXIMA = {
    "input_rows_per_second": 10**15,
    "join_input_rows_per_second": 10**15,
    "key_cardinality": 10**15,
    "state_bytes_per_row": JAVA_INT,
    "shuffle_partitions": JAVA_INT,
    "max_cores": JAVA_INT,
    "state_growth_factor": 1000,
}
