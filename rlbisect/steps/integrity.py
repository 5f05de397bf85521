"""A snapshot file's bytes: written atomically, sealed with a hash, read only as far as declared.

A snapshot is a safetensors file whose metadata ``rlbisect.sha256`` holds the sha256 of the whole
file with those 64 hex digits read as "0": truncation or one flipped byte anywhere is refused. It
detects corruption, not a forger (anyone can recompute it); safety against hostile files comes
from the format (safetensors + JSON, never pickle) and from validating every field on load.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import struct
from pathlib import Path


class IntegrityError(ValueError):
    """The bytes are not an intact snapshot file (the loader says which file)."""


HASH_KEY = "rlbisect.sha256"
ZERO_HASH = "0" * 64
MAX_HEADER = 100 * 1024 * 1024  # safetensors' own cap; a larger claim is refused before allocating
_KEY = re.compile(rb'"rlbisect\.sha256":"')  # unescaped quotes: only the real key matches
_VALUE = re.compile(rb'[0-9a-f]{64}"')


def seal(blob: bytearray) -> bytearray:
    """Write the content hash into a safetensors blob saved with ``HASH_KEY: ZERO_HASH``."""
    key = _KEY.search(blob, 8, 8 + struct.unpack("<Q", blob[:8])[0])
    if key is None:
        raise ValueError(f"blob saved without the {HASH_KEY} placeholder")
    at = key.end()
    blob[at:at + 64] = hashlib.sha256(blob).hexdigest().encode()
    return blob


def atomic_write(path: Path, data: bytes | bytearray) -> None:
    """Write ``data`` to ``path`` all or nothing: a temp file beside it, fsync, rename."""
    # os.open with 0o666 honours the umask (mkstemp would force 0600 on a file meant to be shared).
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable; not possible everywhere (e.g. Windows)
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def read_declared(path: Path) -> bytes:
    """The file's bytes, after checking that its size is exactly what its header declares
    (8 + header + the end of the last tensor): nothing larger is ever read into memory."""
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise IntegrityError("empty or too short to be a snapshot")
        n = struct.unpack("<Q", prefix)[0]
        if n > MAX_HEADER or 8 + n > size:
            raise IntegrityError(f"header length {n} does not fit a {size}-byte file "
                                "(not a snapshot, or truncated)")
        header = f.read(n)
        try:
            entries = json.loads(header)
            end = max([int(e["data_offsets"][1]) for k, e in entries.items() if k != "__metadata__"],
                      default=0)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            raise IntegrityError("the header is not a safetensors header (not a snapshot)") from None
        if 8 + n + end != size:
            raise IntegrityError(f"the header declares {8 + n + end} bytes but the file has {size} "
                                "(truncated, or something was appended)")
        return prefix + header + f.read(end)


def verified_metadata(data: bytes) -> dict[str, str]:
    """The safetensors metadata, after checking length fields and the content hash."""
    if len(data) < 8:
        raise IntegrityError("empty or too short to be a snapshot")
    n = struct.unpack("<Q", data[:8])[0]
    if n > MAX_HEADER or 8 + n > len(data):
        raise IntegrityError(f"header length {n} does not fit a {len(data)}-byte file "
                            "(not a snapshot, or truncated)")
    found = [m.end() for m in _KEY.finditer(data, 8, 8 + n)]
    if not found:
        raise IntegrityError("no rlbisect content hash (not an rlbisect snapshot, or a damaged header)")
    at = found[0]
    if len(found) > 1 or not _VALUE.fullmatch(data, at, at + 65):
        raise IntegrityError("content hash field is damaged: the file is corrupted or was modified")
    claimed, view = data[at:at + 64].decode(), memoryview(data)
    h = hashlib.sha256(view[:at])  # hashed in place: no second copy of a large file
    h.update(ZERO_HASH.encode())
    h.update(view[at + 64:])
    if not hmac.compare_digest(h.hexdigest(), claimed):
        raise IntegrityError("content hash mismatch: the file is corrupted, truncated or was modified")
    return json.loads(data[8:8 + n])["__metadata__"]
