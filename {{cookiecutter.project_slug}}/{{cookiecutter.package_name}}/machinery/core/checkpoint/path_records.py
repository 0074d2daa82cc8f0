"""The absolute paths Spark writes into a checkpoint and a file sink's log: found, and moved.

Spark's logs are text files of JSON lines, and a few kinds of line name files by absolute URI:
- the files source's log of the files it has read (`<checkpoint>/sources/<n>/<batch>`, "path"):
  move the landing folder without it and Spark reads every file again;
- transformWithState's operator metadata (`<checkpoint>/state/<op>/_metadata/v2/<batch>`,
  "stateSchemaFilePaths"): schema files inside the checkpoint itself, read at every start;
- the parquet sink's log (`<output>/_spark_metadata/<batch>`, "path"): the data files it committed,
  which Spark reads the output through.
Offsets, commits, the query id and Delta's log (its paths are relative) hold none. Rather than a list of
those files, every text file is scanned, so a kind of line a later Spark adds is found too. Each file
has a Hadoop checksum beside it (`.<name>.crc`), written again with it: Spark's local file system
refuses a file whose checksum does not match.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import unquote, urlparse

from .copying import write_atomically
from .file_access import STORES, LocationPath, path_scheme

# State data, data files and checksums: binary, never JSON lines.
BINARY_SUFFIXES = (".zip", ".sst", ".delta", ".snapshot", ".changelog", ".parquet", ".crc", ".log", ".checkpoint")
CRC_BYTES_PER_CHECKSUM = 512  # what Hadoop's local file system writes

Moves = list[tuple[Path, Path]]  # (old folder, new folder)
# Spark writes a local file two ways: file:///... percent-encoded (the logs of the sinks and sources),
# file:/... as it is (transformWithState's schema files), as Hadoop's Path.toUri and Path.toString give them.
URI_PREFIX, PATH_PREFIX = "file:///", "file:/"
URI_PATH_SAFE = frozenset("-_.!~*'();:@&=+$,/")  # java.net.URI leaves these as they are in a path


def local_path(uri: str) -> Path | None:
    """The local file a file: URI names, None for anything else."""
    if uri.startswith(URI_PREFIX):  # Hadoop's Path.toUri(): percent-encoded
        return Path(unquote(urlparse(uri).path))
    if uri.startswith(PATH_PREFIX) and not uri.startswith("file://"):  # Hadoop's Path.toString(): as it is
        return Path(uri.removeprefix("file:"))
    return None


def file_path(uri: str) -> Path | None:
    """The file a URI names as the machinery's readers name it: a local file, or Path(uri) for another file
    system's (a LocationPath); None for what is not a URI."""
    local = local_path(uri)
    if local is not None or "://" not in uri:
        return local
    return LocationPath(unquote(uri))


def moved_uri(uri: str, moves: Moves) -> str | None:
    """uri with the folder it is under replaced by that folder's new place (on this machine's disk or an
    object store), written the way Spark writes it (the rest kept as it was), None when it is under none."""
    found = file_path(uri)
    if found is None:
        return None
    for old, new in moves:
        if found != old and old not in found.parents:
            continue
        depth = len(found.relative_to(old).parts)
        if uri.startswith(PATH_PREFIX) and not uri.startswith("file://"):  # Path.toString(): as it is
            return "/".join([_folder_uri(new, quoted=False), *found.parts[len(found.parts) - depth :]])
        segments = urlparse(uri).path.split("/")  # Path.toUri(): percent-encoded, a store's URIs too
        return "/".join([_folder_uri(new, quoted=True), *segments[len(segments) - depth :]])
    return None


def _folder_uri(folder: Path, quoted: bool) -> str:
    """A folder's URI as Spark writes it: file:/path as it is, file:///path or s3a://bucket/key percent-encoded."""
    scheme = path_scheme(folder)
    if scheme:
        return f"{scheme}://{java_quote('/'.join(folder.parts[1:]))}"
    return f"file://{java_quote(str(folder))}" if quoted else f"file:{folder}"


def java_quote(path: str) -> str:
    """A path as java.net.URI quotes it (what Hadoop's Path.toUri gives): the files source compares the
    files it lists with its log as these strings, so the new folder must read exactly as Spark writes it."""
    return "".join(
        char
        if (char.isascii() and (char.isalnum() or char in URI_PATH_SAFE))
        or (not char.isascii() and char.isprintable() and not char.isspace())
        else "".join(f"%{byte:02X}" for byte in char.encode("utf-8"))
        for char in path
    )


# The URIs of files that a move carries along: this machine's, and an object store's.
_PREFIXES = ("file:", *(f"{scheme}://" for scheme in STORES))


def uris_in(root: Path) -> dict[Path, list[str]]:
    """Every text file under root that holds file: URIs (or an object store's), with them."""
    found = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.endswith(BINARY_SUFFIXES):
            uris = uris_in_file(path)
            if uris:
                found[path] = uris
    return found


def uris_in_file(path: Path) -> list[str]:
    return [uri for line in _lines(path) for uri in _uris(json_line(line))]


def is_under(uri: str, folders: list[Path]) -> bool:
    found = file_path(uri)
    return found is not None and any(found == folder or folder in found.parents for folder in folders)


def rewrite(path: Path, moves: Moves) -> bool:
    """Move the URIs in one file (and write its checksum again); False when none was under a moved folder."""
    lines = _lines(path)
    changed = [_changed_line(line, lambda uri: moved_uri(uri, moves)) for line in lines]
    if changed == lines:
        return False
    data = "\n".join(changed).encode("utf-8")
    write_atomically(path, data)
    checksum = path.with_name(f".{path.name}.crc")
    if checksum.exists():
        write_atomically(checksum, hadoop_crc(data))
    return True


def without_folders(path: Path) -> str:
    """SHA-256 of the file with each URI cut to its file name: equal before and after a move."""
    text = "\n".join(_changed_line(line, lambda uri: uri.rsplit("/", 1)[-1]) for line in _lines(path))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def hadoop_crc(data: bytes) -> bytes:
    """The `.crc` file Hadoop's ChecksumFileSystem keeps beside a file: a header, then a CRC-32 per 512 bytes."""
    sums = (zlib.crc32(data[i : i + CRC_BYTES_PER_CHECKSUM]) for i in range(0, len(data), CRC_BYTES_PER_CHECKSUM))
    return b"crc\x00" + struct.pack(">i", CRC_BYTES_PER_CHECKSUM) + b"".join(struct.pack(">I", s) for s in sums)


def _lines(path: Path) -> list[str]:
    data = path.read_bytes()
    if not any(prefix.encode() in data for prefix in _PREFIXES):
        return []
    try:
        return data.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        return []


def json_line(line: str) -> object:
    """One line of a checkpoint log as JSON, None where it is not JSON."""
    try:
        return json.loads(line)
    except ValueError:
        return None


def _uris(value: object) -> Iterator[str]:
    if isinstance(value, str) and value.startswith(_PREFIXES):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _uris(item)
    elif isinstance(value, list):
        for item in value:
            yield from _uris(item)


def _changed_line(line: str, change: Callable[[str], str | None]) -> str:
    """The line with each URI changed, the rest of its bytes as they were."""
    for uri in set(_uris(json_line(line))):
        new = change(uri)
        if new is not None:
            line = line.replace(json.dumps(uri, ensure_ascii=False), json.dumps(new, ensure_ascii=False))
    return line
