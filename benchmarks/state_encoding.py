"""The Avro state encoding against UnsafeRow: custom_state's cost per input row with each, side by side.

Avro (spark.sql.streaming.stateStore.encodingFormat avro, Spark 4.0+, transformWithState only) is the
encoding Spark means to last across releases and lets a processor's state schema evolve; UnsafeRow is
Spark's default. Bakes custom_state (RocksDB with changelog checkpointing, its settings' Avro) and runs one
`sustain` try at a fixed rate on one core with each encoding (state_store.encoding_format through the
environment), alternating which goes first, ROUNDS rounds: per try, the state store's µs per input row
(Spark's update, removal and commit times, summed over tasks) and all the core's µs per input row, and
whether the try held the rate. Writes RESULTS_DIR/state_encoding.json and .md. Run nothing else beside it.

    .venv/bin/python benchmarks/state_encoding.py [--rate 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from core_rates import bake, sustain
from overhead import machine, save

REPO = Path(__file__).resolve().parents[1]
ENCODINGS = ("avro", "unsaferow")
SETTING = "STREAM_JOB_STATE_STORE__ENCODING_FORMAT"


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--rate", type=int, default=100, help="input rows per second of each try (default: %(default)s)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="(default: %(default)s)")
    parser.add_argument("--results-dir", type=Path, default=REPO / "benchmarks" / "results")
    return parser.parse_args()


def state_us(attempt: dict) -> float:
    """The state store's µs per input row of one try (as sustain's own figure for its best try)."""
    spent = attempt["state_update_ms"] + attempt["state_remove_ms"] + attempt["state_commit_ms"]
    return spent * 1000 / attempt["input_rows_per_batch"]


def table(rate: int, tries: list[dict]) -> list[str]:
    lines = [
        "# The Avro state encoding against UnsafeRow (custom_state, sustain, 1 core)",
        "",
        f"custom_state's example query (every event its own key), RocksDB with changelog checkpointing, one `sustain`"
        f" try at {rate:,} rows/s a round with each encoding, alternating which goes first. µs of core time per"
        " input row: the state store's (Spark's update, removal and commit times, summed over tasks) and all.",
        "",
        "| round | encoding | held | state µs per row | core µs per row |",
        "| ---: | --- | --- | ---: | ---: |",
    ]
    for row in tries:
        held = "yes" if row["holds"] else "no"
        lines.append(
            f"| {row['round']} | {row['encoding']} | {held} | {row['state_us_per_row']:,.0f} | {row['core_us_per_row']:,.0f} |"
        )
    medians = {
        encoding: {
            key: statistics.median(row[key] for row in tries if row["encoding"] == encoding)
            for key in ("state_us_per_row", "core_us_per_row")
        }
        for encoding in ENCODINGS
    }
    avro, unsaferow = medians["avro"], medians["unsaferow"]
    lines += [
        "",
        f"Median, Avro over UnsafeRow: state µs per row {avro['state_us_per_row']:,.0f} / {unsaferow['state_us_per_row']:,.0f}"
        f" = **{avro['state_us_per_row'] / unsaferow['state_us_per_row']:.2f}**, core µs per row"
        f" {avro['core_us_per_row']:,.0f} / {unsaferow['core_us_per_row']:,.0f}"
        f" = **{avro['core_us_per_row'] / unsaferow['core_us_per_row']:.2f}**.",
        "",
    ]
    return lines


def main() -> None:
    args = arguments()
    scratch = Path(tempfile.mkdtemp(prefix="state-encoding-"))
    tries = []
    try:
        project = bake(scratch, "custom_state")
        for number in range(args.rounds):
            for encoding in ENCODINGS if number % 2 == 0 else ENCODINGS[::-1]:
                os.environ[SETTING] = encoding
                flags = ["--providers", "rocksdb+changelog", "--cores", "1", "--max-tries", "1"]
                found = sustain(
                    project, "custom_state", scratch / f"{number}-{encoding}", *flags, "--start-rate", str(args.rate)
                )
                (result,) = found["results"]
                (attempt,) = result["tries"]
                tries.append(
                    {"round": number + 1, "encoding": encoding, **attempt, "state_us_per_row": state_us(attempt)}
                )
        save(
            args.results_dir,
            "state_encoding",
            {"machine": machine(), "rate": args.rate, "tries": tries},
            table(args.rate, tries),
        )
    finally:
        os.environ.pop(SETTING, None)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
