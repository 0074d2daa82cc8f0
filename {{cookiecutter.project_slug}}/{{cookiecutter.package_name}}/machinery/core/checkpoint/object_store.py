"""Checkpoints, outputs and landing folders on object storage (s3a://, gs://, abfss://): which locations
are there, whether the store answers, and their files read from this machine with pyarrow's file systems.

One reader for every caller and either Spark (Classic or Connect), with no JVM: the guard reads a
checkpoint on S3 before Spark starts, as it reads one on a local disk, hidden files (`_spark_metadata`,
`.crc`) included. Where and as whom come from the standard AWS variables: AWS_ENDPOINT_URL (or
AWS_ENDPOINT_URL_S3) and AWS_REGION here; the credentials through the AWS SDK's own chain
(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_PROFILE, an instance's role), which
pyarrow and Hadoop's S3A (job/spark/object_store.py) both read; settings.yaml holds none of them.
Only s3a:// is proven (against an S3 API server); gs:// and abfss:// go through the same code untested.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from .file_access import STORES, LocationPath
from .files import local_checkpoint

if TYPE_CHECKING:  # pyarrow is imported only when a location is on a store
    from pyarrow import NativeFile
    from pyarrow.fs import FileSystem

# Seconds and attempts before a store that does not answer is one line, not a minute of retries.
TIMEOUT_SECONDS = 5.0
ATTEMPTS = 2


def store_of(location: str) -> str | None:
    """The scheme of an object store the location is on (s3a, gs, abfss), None for any other."""
    scheme = location.split("://", 1)[0] if "://" in location else ""
    return scheme if scheme in STORES else None


def s3_endpoint(environ: Mapping[str, str] = os.environ) -> str | None:
    """The S3 API's endpoint the AWS variables name (an S3-compatible server's), None for AWS's own."""
    return environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL") or None


def s3_region(environ: Mapping[str, str] = os.environ) -> str | None:
    return environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or None


def bucket_and_key(location: str) -> tuple[str, str]:
    """The bucket (a container on ADLS) and the key under it."""
    parsed = urlparse(location)
    bucket = parsed.netloc.split("@", 1)[0] if parsed.scheme == "abfss" else parsed.netloc
    return bucket, parsed.path.strip("/")


@cache
def _file_system(scheme: str, account: str, endpoint: str | None, region: str | None) -> FileSystem:
    """pyarrow's file system for the store, as the AWS (or Google, Azure) variables describe it."""
    from pyarrow import fs

    if scheme == "s3a":
        return fs.S3FileSystem(
            endpoint_override=endpoint,
            region=region,
            connect_timeout=TIMEOUT_SECONDS,
            request_timeout=TIMEOUT_SECONDS,
            retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=ATTEMPTS),
        )
    if scheme == "gs":
        return fs.GcsFileSystem(request_timeout=TIMEOUT_SECONDS)
    return fs.AzureFileSystem(account_name=account.split(".", 1)[0])


def file_system(location: str) -> FileSystem:
    scheme = store_of(location)
    assert scheme is not None, location
    account = urlparse(location).netloc.split("@", 1)[-1] if scheme == "abfss" else ""
    return _file_system(scheme, account, s3_endpoint(), s3_region())  # the variables as they are now


class StoreFiles:
    """A store's files (core/checkpoint/file_access.Files), named by LocationPath: the checkpoint
    `s3a://lake/ckpt` is LocationPath("s3a://lake/ckpt"), its commits that path / "commits"."""

    def __init__(self, location: str) -> None:
        self._fs = file_system(location)

    def _key(self, path: Path) -> str:
        """The store's name of the file: its bucket (an ADLS container) and the key under it."""
        bucket, key = bucket_and_key("://".join((path.parts[0].rstrip(":"), "/".join(path.parts[1:]))))
        return f"{bucket}/{key}".rstrip("/")

    def list(self, folder: Path) -> list[Path]:
        from pyarrow.fs import FileSelector

        found = self._fs.get_file_info(FileSelector(self._key(folder), allow_not_found=True))
        return sorted(folder / PurePosixPath(info.path).name for info in found)

    def read(self, path: Path) -> bytes | None:
        try:
            with self._fs.open_input_stream(self._key(path)) as stream:
                return stream.readall()
        except FileNotFoundError:
            return None

    def exists(self, path: Path) -> bool:
        from pyarrow.fs import FileType

        return self._fs.get_file_info(self._key(path)).type != FileType.NotFound

    def open(self, path: Path) -> NativeFile:
        """The file opened for reads by range (a parquet file's footer without the rest)."""
        return self._fs.open_input_file(self._key(path))

    def download(self, folder: Path, into: Path, leave_out: tuple[str, ...] = ()) -> None:
        """Copy every file under `folder` into the local folder `into` (made), but the top-level names
        `leave_out` (the lease)."""
        into.mkdir(parents=True, exist_ok=True)
        for name in self.sizes(folder):
            if name.split("/", 1)[0] in leave_out:
                continue
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            with self._fs.open_input_stream(self._key(folder / name)) as stream:
                (into / name).write_bytes(stream.readall())

    def upload(self, local: Path, folder: Path, last: tuple[str, ...] = ()) -> builtins.list[str]:
        """Copy every file under the local folder `local` to `folder`, the top-level names `last` after the
        rest, in that order (a checkpoint's logs and query id: until they are there, there is no checkpoint),
        but Hadoop's local checksums (`.<name>.crc`: a store keeps none). The files copied, by their path."""
        files = sorted(path for path in local.rglob("*") if path.is_file() and not path.name.endswith(".crc"))
        ranked = sorted(files, key=lambda path: _rank(path.relative_to(local).parts[0], last))
        for path in ranked:
            self.write(folder / path.relative_to(local), path.read_bytes())
        return [path.relative_to(local).as_posix() for path in ranked]

    def write(self, path: Path, data: bytes) -> None:
        """The object at `path` made to hold `data` (a PUT: whole or not at all)."""
        with self._fs.open_output_stream(self._key(path)) as stream:
            stream.write(data)

    def delete(self, path: Path) -> None:
        """The object at `path` deleted (nothing to do where there is none)."""
        if self.exists(path):
            self._fs.delete_file(self._key(path))

    def sizes(self, folder: Path) -> dict[str, int]:
        """Every file under `folder` by its path under it, with its size."""
        from pyarrow.fs import FileSelector, FileType

        top = self._key(folder)
        found = self._fs.get_file_info(FileSelector(top, allow_not_found=True, recursive=True))
        return {info.path[len(top) + 1 :]: info.size for info in found if info.type == FileType.File}

    def remove(self, folder: Path) -> None:
        """Delete every file under `folder`."""
        if self.exists(folder):
            self._fs.delete_dir(self._key(folder))


def _rank(name: str, last: tuple[str, ...]) -> int:
    return last.index(name) + 1 if name in last else 0


def store_problems(locations: Mapping[str, str]) -> list[str]:
    """One line per store location whose store does not answer, refuses the credentials, or has no such
    bucket: asked once per bucket (a HEAD request), before anything starts, nothing written."""
    lines, asked = [], set()
    for setting, location in locations.items():
        scheme = store_of(location)
        bucket = bucket_and_key(location)[0] if scheme else ""
        if scheme is None or (scheme, bucket) in asked:
            continue
        asked.add((scheme, bucket))
        problem = _bucket_problem(location, scheme, bucket)
        if problem:
            lines.append(f"{setting} = {location!r}: {problem}")
    return lines


def _bucket_problem(location: str, scheme: str, bucket: str) -> str | None:
    from pyarrow.fs import FileType

    where = f"the S3 API at {s3_endpoint() or 'AWS'}" if scheme == "s3a" else STORES[scheme]
    try:
        missing = file_system(location).get_file_info(bucket).type == FileType.NotFound
    except OSError as error:
        cause = str(error)
        if "NETWORK_CONNECTION" in cause or "curlCode" in cause:
            return (
                f"{where} does not answer ({cause.rsplit('Details: ', 1)[-1]}); check AWS_ENDPOINT_URL and the"
                " network, nothing was written"
            )
        if any(code in cause for code in ("ACCESS_DENIED", "INVALID_ACCESS_KEY", "SIGNATURE", "403", "EXPIRED")):
            return (
                f"{where} refuses these credentials for bucket {bucket} ({cause.split(': ', 1)[-1]}); set"
                " AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) to ones that may read and write it"
            )
        return f"{where} answered {cause}; nothing was written"
    if missing:
        return (
            f"there is no bucket {bucket} at {where}; create it (aws s3 mb s3://{bucket}) or correct the path,"
            " nothing was written"
        )
    return None


def exists_here(location: str) -> bool:
    """Whether there is a folder (or file) at the location, on this machine's disk or on an object store."""
    if store_of(location):
        return StoreFiles(location).exists(LocationPath(location))
    local = local_checkpoint(location)
    return local is not None and local.exists()
