"""The requests a job makes of an object store when its checkpoint is there, and their monthly bill.

Measured, not guessed: benchmarks/object_store_requests.py in the template repository runs the example
queries with their checkpoint and parquet output on an S3 API server (moto's, which logs every request)
through Hadoop 3.5.0's S3A (pyspark 4.2.1, 2 cores), for 5 and for 25 batches, and takes the difference
per batch: the steady state, with the start's requests taken off. A batch, rate source, 1,000 rows:

| query | store | partitions | store instances | PUT | HEAD | LIST | a batch |
| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |
| windowed count | RocksDB + changelog | 2 | 2 | 11.1 | 24.1 | 46.4 | 81.6 |
| windowed count | RocksDB + changelog | 4 | 4 | 15.1 | 31.8 | 61.7 | 108.6 |
| windowed count | HDFS-backed | 2 | 2 | 11.4 | 24.3 | 46.9 | 82.5 |
| windowed count | RocksDB, no changelog | 2 | 2 | 13.2 | 23.9 | 50.1 | 87.2 |
| deduplication | RocksDB + changelog | 2 | 2 | 12.4 | 25.9 | 47.0 | 85.3 |
| join | RocksDB + changelog | 2 | 8 | 23.6 | 48.1 | 94.4 | 166.0 |

No GET: a running query reads nothing back; no DELETE within these runs. Each state store instance
(a partition of an operator's store; a join keeps four a partition) writes a file a batch, whose S3A
write costs a PUT, checks before it (HEAD, LIST) and LISTs of the maintenance; the rest is the batch's
own logs (offsets, commits, the sink's log) and output files. Fitted on the windowed count's 2 against
4 partitions, the join's 8 instances are predicted within 3% (162.6 against 166.0) and the
deduplication within 5%. Checked again by the benchmark at a 1- and a 5-second trigger on fresh runs:
billed / counted 1.12 and 1.00 (windowed count), 0.96 and 0.95 (deduplication), 0.99 and 0.98 (join). Without changelog checkpointing each commit also uploads the snapshot's
files. Not measured: a files source on S3 (it lists the landing folder each batch and reads each file
once: a LIST and a GET a file more), Kafka on either side (no object-store requests), a Delta sink.
"""

from __future__ import annotations

from dataclasses import dataclass

SECONDS_PER_MONTH = 30 * 24 * 3600
# Per batch: the batch's own (logs, output), and each state store instance's.
PER_BATCH = {"PUT": 7.1, "HEAD": 16.35, "LIST": 31.1}
PER_INSTANCE = {"PUT": 2.0, "HEAD": 3.85, "LIST": 7.65}
PER_INSTANCE_SNAPSHOT = {"PUT": 1.05, "HEAD": 0.0, "LIST": 1.85}  # RocksDB without changelog: a snapshot a commit
# S3's two request prices: PUT, COPY, POST and LIST in one; GET, HEAD and the others in the other.
WRITE_CLASS = ("PUT", "LIST")
# S3 Standard, US East (N. Virginia), per 1,000 requests, as AWS published them in 2025 (capacity.request_prices).
DEFAULT_PRICES = {"write_per_1000": 0.005, "read_per_1000": 0.0004}


@dataclass(frozen=True)
class RequestBill:
    per_batch: dict[str, float]
    batches_per_month: float
    prices: dict[str, float]

    @property
    def batch_total(self) -> float:
        return sum(self.per_batch.values())

    @property
    def per_month(self) -> float:
        return self.batch_total * self.batches_per_month

    def cost_per_month(self) -> float:
        write = sum(count for kind, count in self.per_batch.items() if kind in WRITE_CLASS)
        read = self.batch_total - write
        prices = self.prices
        return self.batches_per_month * (write * prices["write_per_1000"] + read * prices["read_per_1000"]) / 1000


def request_bill(
    store_instances: int, trigger_seconds: float, snapshot_each_commit: bool, prices: dict[str, float] | None = None
) -> RequestBill:
    """The requests a batch makes with `store_instances` state store instances, and a month of batches, one a
    trigger (a batch that takes longer than its trigger makes fewer: this is the most)."""
    per_batch = {
        kind: PER_BATCH[kind]
        + store_instances * (PER_INSTANCE[kind] + (PER_INSTANCE_SNAPSHOT[kind] if snapshot_each_commit else 0.0))
        for kind in PER_BATCH
    }
    return RequestBill(per_batch, SECONDS_PER_MONTH / trigger_seconds, {**DEFAULT_PRICES, **(prices or {})})


def bill_lines(bill: RequestBill, trigger: str, store_instances: int, state_bytes: int) -> list[str]:
    """The bill, and advice where the requests cost more than keeping the state there does."""
    kinds = ", ".join(f"{kind} {count:,.0f}" for kind, count in bill.per_batch.items())
    lines = [
        f"about {bill.batch_total:,.0f} requests a batch ({kinds}) for {store_instances} state store instances: at most"
        f" {bill.per_month / 1e6:,.1f} million a month at a {trigger} trigger, ${bill.cost_per_month():,.2f} a month"
        f" at ${bill.prices['write_per_1000']} (PUT, LIST) and ${bill.prices['read_per_1000']} (GET, HEAD) per 1,000"
        " (capacity.request_prices)"
    ]
    storage = state_bytes / 1e9 * 0.023  # S3 Standard's first 50 TB, per GB-month
    if bill.cost_per_month() > 10 * storage:
        minute = RequestBill(bill.per_batch, SECONDS_PER_MONTH / 60, bill.prices)
        lines.append(
            f"the requests cost more than ten times keeping the state there (${storage:,.3f} a month): a longer trigger"
            f" cuts them in proportion (1 minute: ${minute.cost_per_month():,.2f} a month), and each state store"
            f" instance fewer (fewer shuffle partitions) {sum(PER_INSTANCE.values()):.1f} a batch"
        )
    return lines
