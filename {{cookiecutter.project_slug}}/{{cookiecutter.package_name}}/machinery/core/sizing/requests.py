"""The requests a job makes of an object store when its checkpoint is there, and their monthly bill.

Measured, not guessed: benchmarks/object_store_requests.py in the template repository runs the example
queries with their checkpoint and parquet output on an S3 API server (moto's, which logs every request)
through Hadoop 3.5.0's S3A (pyspark 4.2.1, 2 cores), for 5 and for 25 batches, and takes the difference
per batch: the steady state, with the start's requests taken off. A windowed count, rate source (1,000
rows a batch), 1-second trigger, a batch:

| store | partitions | store instances | PUT | HEAD | LIST | GET | DELETE | a batch |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| RocksDB + changelog | 2 | 2 | 9.95 | 54.1 | 39.7 | 0 | 4.5 | 108.2 |
| RocksDB + changelog | 4 | 4 | 15.05 | 93.9 | 62.0 | 4.95 | 7.0 | 182.9 |
| RocksDB, no changelog | 2 | 2 | 13.65 | 71.8 | 53.8 | 1.8 | 5.25 | 146.3 |
| RocksDB + changelog, files source on S3 | 2 | 2 | 13.1 | 84.05 | 57.25 | 3.65 | 6.0 | 164.1 |

Each state store instance (a partition of an operator's store; a join keeps four a partition) writes a
file a batch, whose S3A write costs a PUT and the checks around it (HEADs that mostly find nothing, LISTs),
and its maintenance deletes and reads old versions now and then; the rest is the batch's own logs
(offsets, commits, the sink's log) and output files. Fitted on the runs of 2 instances (the windowed count
and the deduplication at a 1- and a 5-second trigger, and the run above: 108 to 133 a batch, 121.6 on
average) against the join's 8 (258 and 260): 75.8 a batch and 22.9 an instance, which puts the 4
partitions above at 167 (0.92 of the count). Without changelog checkpointing each commit also uploads the
snapshot's files; a files source on S3 lists its folder, checks and reads each new file and keeps its own
log (both the difference from the run above). Checked by the benchmark for each of those queries
(benchmarks/results/object_store_requests.md).
DELETE is free on S3. Not measured: Kafka on either side (no object-store requests), a Delta sink.
"""

from __future__ import annotations

from dataclasses import dataclass

SECONDS_PER_MONTH = 30 * 24 * 3600
# Per batch: the batch's own (logs, output), each state store instance's, and each files source's on the store.
PER_BATCH = {"PUT": 7.0, "HEAD": 38.4, "LIST": 27.2, "GET": 0.45, "DELETE": 2.75}
PER_INSTANCE = {"PUT": 2.0, "HEAD": 11.45, "LIST": 8.35, "GET": 0.05, "DELETE": 1.05}
PER_INSTANCE_SNAPSHOT = {"PUT": 1.85, "HEAD": 8.85, "LIST": 7.05, "GET": 0.95, "DELETE": 0.4}  # no changelog
PER_FILES_SOURCE = {"PUT": 3.15, "HEAD": 29.95, "LIST": 17.55, "GET": 3.75, "DELETE": 1.5}  # a file a batch
# S3's request prices: PUT, COPY, POST and LIST in one class; GET, HEAD and the others in the other; DELETE free.
WRITE_CLASS = ("PUT", "LIST")
FREE = ("DELETE",)
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
        read = self.batch_total - write - sum(count for kind, count in self.per_batch.items() if kind in FREE)
        prices = self.prices
        return self.batches_per_month * (write * prices["write_per_1000"] + read * prices["read_per_1000"]) / 1000


def request_bill(
    store_instances: int,
    trigger_seconds: float,
    snapshot_each_commit: bool,
    prices: dict[str, float] | None = None,
    files_sources: int = 0,
) -> RequestBill:
    """The requests a batch makes with `store_instances` state store instances and `files_sources` files sources
    on the store, and a month of batches, one a trigger (a batch that takes longer than its trigger makes
    fewer: this is the most)."""
    per_batch = {
        kind: PER_BATCH[kind]
        + store_instances * (PER_INSTANCE[kind] + (PER_INSTANCE_SNAPSHOT[kind] if snapshot_each_commit else 0.0))
        + files_sources * PER_FILES_SOURCE[kind]
        for kind in PER_BATCH
    }
    return RequestBill(per_batch, SECONDS_PER_MONTH / trigger_seconds, {**DEFAULT_PRICES, **(prices or {})})


def bill_lines(bill: RequestBill, trigger: str, store_instances: int, state_bytes: int) -> list[str]:
    """The bill, and advice where the requests cost more than keeping the state there does."""
    kinds = ", ".join(f"{kind} {count:,.0f}" for kind, count in bill.per_batch.items())
    lines = [
        f"about {bill.batch_total:,.0f} requests a batch ({kinds}) for {store_instances} state store instances: at most"
        f" {bill.per_month / 1e6:,.1f} million a month at a {trigger} trigger, ${bill.cost_per_month():,.2f} a month"
        f" at ${bill.prices['write_per_1000']} (PUT, LIST) and ${bill.prices['read_per_1000']} (GET, HEAD) per 1,000,"
        " DELETE free"
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
