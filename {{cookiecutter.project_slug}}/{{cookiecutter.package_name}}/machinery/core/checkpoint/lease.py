"""One driver at a time on a checkpoint on S3, from any machine: a lease object beside the checkpoint.

A local lock (run_lock.py) sees the processes of one machine; two drivers on two machines (a redeploy
that overlaps, a scheduler's second copy) both write the same batches. So a start on `s3a://` creates
`<checkpoint>/.lease` by a conditional write (If-None-Match: *, which S3 refuses when the object
exists), renews it while it works by another conditional write on the ETag it holds (If-Match: a
takeover meanwhile fails the renewal), and deletes it when done. An existing lease is taken over only
once it has lapsed: not renewed for query.lease by the store's own clock (its Last-Modified against the
Date of the store's answer, so no machine's clock matters), again by If-Match, so of two starts taking
over, one wins. A driver killed with -9 renews nothing: its checkpoint is free a lease later.
A job that loses its lease (a takeover after it could not renew for a lease) stops (SIGTERM).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from .object_store import TIMEOUT_SECONDS, bucket_and_key, s3_endpoint

LEASE_OBJECT = ".lease"
RENEWALS_PER_LEASE = 3  # renewed this many times a lease: two may fail before it lapses


class LeaseBusy(Exception):
    """Another driver holds the lease; the message names it and when it lapses."""


@dataclass
class _Held:
    bucket: str
    key: str
    etag: str
    body: dict[str, Any]


def _client() -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise LeaseBusy(
            "a checkpoint on s3a:// is leased through boto3, which is not installed: pip install 'boto3>=1.36'"
        ) from None
    config = Config(connect_timeout=TIMEOUT_SECONDS, read_timeout=TIMEOUT_SECONDS, retries={"max_attempts": 2})
    return boto3.client("s3", endpoint_url=s3_endpoint(), config=config)


def _code(error: Exception) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


@contextmanager
def leasing(location: str, purpose: str, lease_seconds: float) -> Iterator[None]:
    """Hold the lease of the checkpoint at `location` for the block, renewed every third of a lease."""
    client = _client()
    bucket, prefix = bucket_and_key(location)
    key = f"{prefix}/{LEASE_OBJECT}".lstrip("/")
    body = {
        "holder": f"{purpose} on {socket.gethostname()}, process {os.getpid()}",
        "id": str(uuid.uuid4()),
        "lease_seconds": lease_seconds,
    }
    try:
        held = _take(client, bucket, key, body, location, lease_seconds)
    except LeaseBusy:
        raise
    except Exception as error:  # noqa: BLE001  # botocore's: a store that does not answer, refuses, ...
        raise LeaseBusy(f"{location}: its lease could not be taken ({error}); nothing was written") from None
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(client, held, lease_seconds, stop), daemon=True, name="lease")
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        _release(client, held)


def _take(client: Any, bucket: str, key: str, body: dict, location: str, lease_seconds: float) -> _Held:
    data = json.dumps(body).encode()
    try:
        answer = client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        return _Held(bucket, key, answer["ETag"], body)
    except Exception as error:  # noqa: BLE001  # botocore's ClientError: only a lease there is an answer here
        if _code(error) not in ("PreconditionFailed", "ConditionalRequestConflict"):
            raise
    found = client.get_object(Bucket=bucket, Key=key)
    other = json.loads(found["Body"].read() or b"{}")
    now = parsedate_to_datetime(found["ResponseMetadata"]["HTTPHeaders"]["date"])
    idle = (now - found["LastModified"]).total_seconds()
    their_lease = float(other.get("lease_seconds", lease_seconds))
    holder = other.get("holder", "another driver")
    if idle < their_lease:
        raise LeaseBusy(
            f"{location} is leased by {holder} (renewed {idle:.0f} s ago: the lease lapses in {their_lease - idle:.0f} s"
            " unless it is renewed again): stop that driver first; a second one beside it would write the same"
            " batches and damage the checkpoint and the output"
        )
    try:
        answer = client.put_object(Bucket=bucket, Key=key, Body=data, IfMatch=found["ETag"])
    except Exception as error:  # noqa: BLE001
        if _code(error) in ("PreconditionFailed", "ConditionalRequestConflict"):
            raise LeaseBusy(f"{location}: another start took over the lapsed lease of {holder} first") from None
        raise
    print(
        f"checkpoint: took over the lease of {holder}, lapsed (not renewed for {idle:.0f} s, its lease"
        f" {their_lease:.0f} s): that driver is gone",
        file=sys.stderr,
        flush=True,
    )
    return _Held(bucket, key, answer["ETag"], body)


def _renew(client: Any, held: _Held, lease_seconds: float, stop: threading.Event) -> None:
    while not stop.wait(lease_seconds / RENEWALS_PER_LEASE):
        try:
            answer = client.put_object(
                Bucket=held.bucket, Key=held.key, Body=json.dumps(held.body).encode(), IfMatch=held.etag
            )
            held.etag = answer["ETag"]
        except Exception as error:  # noqa: BLE001  # a store that does not answer: the next renewal tries again
            if _code(error) not in ("PreconditionFailed", "NoSuchKey"):
                continue
            print(
                f"checkpoint: the lease of s3a://{held.bucket}/{held.key} was taken over by another driver (this one"
                f" could not renew it for {lease_seconds:.0f} s): stopping",
                file=sys.stderr,
                flush=True,
            )
            os.kill(os.getpid(), signal.SIGTERM)
            return


def _release(client: Any, held: _Held) -> None:
    """Delete the lease where it is still this driver's (a takeover's is left to its holder)."""
    try:
        if client.head_object(Bucket=held.bucket, Key=held.key)["ETag"] == held.etag:
            client.delete_object(Bucket=held.bucket, Key=held.key)
    except Exception:  # noqa: BLE001, S110  # gone, or the store does not answer: it lapses by itself
        pass
