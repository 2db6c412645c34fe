"""The run secret and the counter-based Gaussian generator keyed by (secret, step, stream).

Every Gaussian draw of a run is a pure function of (secret, step, stream, size):

    philox_key = BLAKE2b-128(key = secret, message = "dpstream-noise/v1" ‖ step ‖ stream)
    draw       = numpy.random.Generator(Philox(key = philox_key)).standard_normal(size)

BLAKE2b in keyed mode is a PRF, so draws for different (step, stream) pairs are independent streams
of a counter-based generator (Philox 4x64, Salmon et al. 2011). Any step's noise can therefore be
regenerated bit-for-bit in any process: λ-correlated noise replays Z_{t−1} instead of storing it, the
tree mechanism rebuilds its live nodes from the step index, and a retried or resumed step releases
exactly the values it released before (no second charge to the ledger).

The secret comes from OS entropy (``secrets.token_bytes``). ``NoiseKey`` never shows it: its repr and
str are redacted, it refuses to be pickled (so it cannot ride along to a Dask worker or into a log by
accident), and the only way out is the explicit ``export_secret()`` used by checkpoints, which must be
stored like the raw data.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct

import numpy as np

__all__ = ["NoiseKey", "gaussian"]

_SECRET_BYTES = 32
_DOMAIN = b"dpstream-noise/v1"


class NoiseKey:
    """A 256-bit run secret. Create with ``NoiseKey.generate()``."""

    __slots__ = ("_secret",)

    def __init__(self, secret: bytes):
        if not isinstance(secret, (bytes, bytearray)) or len(secret) != _SECRET_BYTES:
            raise ValueError(f"a noise key secret must be exactly {_SECRET_BYTES} bytes")
        self._secret = bytes(secret)

    @classmethod
    def generate(cls) -> NoiseKey:
        """A fresh key from the operating system's entropy source."""
        return cls(secrets.token_bytes(_SECRET_BYTES))

    @classmethod
    def from_secret(cls, secret: bytes) -> NoiseKey:
        """Rebuild a key from ``export_secret()`` output (checkpoint restore)."""
        return cls(secret)

    def export_secret(self) -> bytes:
        """The raw secret, for checkpoints only. Whoever holds it can subtract the noise."""
        return self._secret

    @property
    def key_id(self) -> str:
        """A public 64-bit identifier (a one-way hash): lets a checkpoint be matched to its run
        without revealing the key."""
        return hashlib.blake2b(self._secret, digest_size=8, person=b"dpstream-keyid").hexdigest()

    def derive(self, name: str) -> NoiseKey:
        """An independent key for the named part of a run (a search's candidate), a keyed one-way hash of
        this key's secret: who holds the derived key learns nothing of this one."""
        digest = hashlib.blake2b(
            name.encode("utf-8"), key=self._secret, digest_size=_SECRET_BYTES, person=b"dpstream-derive"
        )
        return NoiseKey(digest.digest())

    def philox_key(self, step: int, stream: str) -> int:
        if not isinstance(step, (int, np.integer)) or step < 0 or step >= 2**63:
            raise ValueError(f"step must be an integer in [0, 2**63), got {step!r}")
        stream_bytes = stream.encode("utf-8")
        message = _DOMAIN + struct.pack(">QI", int(step), len(stream_bytes)) + stream_bytes
        digest = hashlib.blake2b(message, key=self._secret, digest_size=16).digest()
        return int.from_bytes(digest, "little")

    def __repr__(self) -> str:
        return f"NoiseKey(id={self.key_id}, secret=<redacted>)"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NoiseKey) and hmac.compare_digest(self._secret, other._secret)

    def __hash__(self) -> int:
        return hash(self.key_id)

    def __copy__(self) -> NoiseKey:
        return self  # immutable: copies (e.g. scikit-learn's clone) share the key, never serialise it

    def __deepcopy__(self, memo: dict) -> NoiseKey:
        return self

    def __reduce__(self):
        raise TypeError(
            "NoiseKey cannot be pickled: it would leak the noise secret; checkpoints store it "
            "explicitly with export_secret()"
        )


def gaussian(key: NoiseKey, step: int, stream: str, size: int | tuple[int, ...]) -> np.ndarray:
    """Standard normal draws (float64) for (step, stream), identical on every call and process."""
    generator = np.random.Generator(np.random.Philox(key=key.philox_key(step, stream)))
    return generator.standard_normal(size)


def symmetric_noise(draws: np.ndarray, dim: int) -> np.ndarray:
    """The symmetric matrix whose upper triangle (diagonal included, row-major) is ``draws``: the noise of
    a released XᵀX (AdaSSP, the private preconditioner), d(d + 1)/2 draws."""
    upper = np.zeros((dim, dim))
    upper[np.triu_indices(dim)] = draws
    return upper + np.triu(upper, 1).T
