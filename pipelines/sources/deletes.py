"""A pinned version's deletes inside one data file, as they travel with the file (``TableFile.deleted``,
``LakeFile.deleted``): the positions encoded and decoded, and their digest for the lake's fingerprint."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["encode_positions", "deleted_positions", "deletes_digest"]


def encode_positions(positions: np.ndarray) -> bytes:
    """Deleted positions as they travel with a file (sorted little-endian int64, compressed by Arrow's
    zstd codec only when it shrinks them)."""
    if positions.size == 0:
        return b""
    raw = np.unique(positions.astype(np.int64)).astype("<i8").tobytes()
    packed = pa.compress(raw, codec="zstd", asbytes=True)
    return b"Z" + len(raw).to_bytes(8, "little") + packed if len(packed) < len(raw) else b"R" + raw


def deleted_positions(encoded: bytes) -> np.ndarray:
    """The sorted row positions a file's ``deleted`` field deletes."""
    if not encoded:
        return np.zeros(0, np.int64)
    if encoded[:1] == b"Z":
        size = int.from_bytes(encoded[1:9], "little")
        raw = pa.decompress(encoded[9:], decompressed_size=size, codec="zstd", asbytes=True)
    else:
        raw = encoded[1:]
    return np.frombuffer(raw, dtype="<i8").astype(np.int64)


def deletes_digest(encoded: bytes, constants: tuple[tuple[str, Any, pa.DataType], ...]) -> str:
    """What a version does to a file beyond its bytes: its deleted positions and partition values."""
    digest = hashlib.sha256(deleted_positions(encoded).astype("<i8").tobytes())
    digest.update(repr(sorted(constants)).encode())
    return digest.hexdigest()[:24]
