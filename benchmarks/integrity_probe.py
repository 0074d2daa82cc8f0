"""Runs inside a baked project (benchmarks/integrity_costs.py copies it there): the project's query on
the same sample files once per integrity variant and round, all in one local[2] JVM, on RocksDB with
changelog checkpointing, each run on a new checkpoint. Prints one JSON line per run: its variant and
round, each batch's duration, the state operator's commit time and the changelog writer's commit
latency, then the files and bytes the run left in the checkpoint's state folder.

    python integrity_probe.py --files 8 --events-per-file 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import tempfile
from pathlib import Path

from stream_job.machinery.core.settings import Settings, load_settings
from stream_job.machinery.job.endpoints.sample_input import UNIQUE_KEYS, write_for_settings
from stream_job.machinery.job.run.runner import run_query
from stream_job.machinery.job.spark.session import apply_confs, local_session
from stream_job.machinery.operations.calibration import trial_settings

BASELINE = {"checkpoint_format_version": 1, "file_checksums": False, "row_checksums": False}
# variant -> state_store.integrity; each adds one feature to the baseline, the last all of them.
VARIANTS = {
    "baseline": BASELINE,
    "format_v2": {**BASELINE, "checkpoint_format_version": 2},
    "format_v2+file_checksums": {**BASELINE, "checkpoint_format_version": 2, "file_checksums": True},
    "row_checksums": {**BASELINE, "row_checksums": True},
    "all": {"checkpoint_format_version": 2, "file_checksums": True, "row_checksums": True},
}


def variant_settings(base: dict, integrity: dict, checkpoint: Path) -> Settings:
    data = json.loads(json.dumps(base))
    # Auto snapshot repair costs nothing until a snapshot fails to load: on in every variant.
    data["state_store"]["integrity"] = {**integrity, "auto_snapshot_repair": True}
    data["query"]["checkpoint_location"] = str(checkpoint)
    data["sink"]["path"] = str(checkpoint.with_name(checkpoint.name + "-output"))
    return Settings(**data)


def state_files(checkpoint: Path) -> tuple[int, int]:
    files = [path for path in (checkpoint / "state").rglob("*") if path.is_file()]
    return len(files), sum(path.stat().st_size for path in files)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, required=True)
    parser.add_argument("--events-per-file", type=int, required=True)
    parser.add_argument("--rounds", type=int, required=True)
    args = parser.parse_args()
    settings = load_settings("settings.yaml")
    with tempfile.TemporaryDirectory(prefix="integrity-") as scratch:
        base = trial_settings(settings, Path(scratch)).model_dump()
        base["state_store"].update(provider="rocksdb", changelog_checkpointing=True)
        write_for_settings(Settings(**base), args.files, args.events_per_file, keys=UNIQUE_KEYS)
        spark = local_session("integrity-probe", {})
        try:
            names = list(VARIANTS)
            # A first run of every variant, not printed: the JVM compiles Spark's code paths during it.
            for round_number in [-1, *range(args.rounds)]:
                # Alternating order: each round starts one variant later, so no variant always runs first.
                shift = round_number % len(names)
                for name in names[shift:] + names[:shift]:
                    checkpoint = Path(scratch) / f"{name}-{round_number}"
                    trial = variant_settings(base, VARIANTS[name], checkpoint)
                    apply_confs(spark, trial)
                    query = run_query(spark, trial, progress_to=io.StringIO())
                    batches = []
                    for progress in query.recentProgress:
                        operators = progress.get("stateOperators") or []
                        metrics = [op.get("customMetrics") or {} for op in operators]
                        batches.append(
                            {
                                "batch": progress["batchId"],
                                "rows": progress.get("numInputRows", 0),
                                "batch_ms": progress.get("batchDuration", 0),
                                "commit_ms": sum(op.get("commitTimeMs", 0) for op in operators),
                                "changelog_commit_ms": sum(
                                    int(m.get("rocksdbChangeLogWriterCommitLatencyMs", 0)) for m in metrics
                                ),
                            }
                        )
                    files, size = state_files(checkpoint)
                    record = {"variant": name, "round": round_number, "batches": batches}
                    if round_number >= 0:
                        print(json.dumps({**record, "state_files": files, "state_bytes": size}), flush=True)
                    shutil.rmtree(checkpoint)
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
