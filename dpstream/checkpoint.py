"""Durable coordinator state: checkpoints that make a run resumable and its releases replayable.

A checkpoint holds what the coordinator needs to continue: the index of the next step, the
algorithm state (parameters, averaging accumulators, SRGD's iterates and running sum, DP-AMBSSGD's clip
history, the noise-process state), the operator-only training losses, the run id, a fingerprint of the
configuration and **the noise secret**. Whoever holds a checkpoint can subtract the noise from the
released values: store checkpoints like the raw data.

The first checkpoint is written before any release, so the key survives any crash; a resumed run
regenerates every step's noise from it and releases exactly the values it released before, so the
ledger is charged once. Writes are atomic (temporary file then rename, or one PUT). A store that cannot
be reached is waited for through the policy's ``outage`` window (``dpstream.outages``: 10 minutes by
default); any other failed write is retried a few times with exponential backoff, then a
``CheckpointError`` names the location. Either way the last good checkpoint is left intact.

Format (version 2): one ``checkpoint.npz`` per run id, written in a single atomic put. Its ``meta``
entry is UTF-8 JSON (run id, fingerprint, next step, losses, creation time, the ledger claim token, the
data version the run reads, the state's structure); the
other entries are the state's arrays and the noise secret (``dpstream.state_codec``). It is read with
``allow_pickle=False`` and state objects are rebuilt only from a closed list of state classes, so
loading a checkpoint runs no code. Version 1 was a pickle (``checkpoint.pkl``): such a checkpoint is
refused, not loaded, with a message naming the fix. Checkpoints still hold the noise secret: keep them
as private as the raw data.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import time
import zipfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpstream.noise import NoiseKey
from dpstream.outages import OutagePolicy, is_unreachable
from dpstream.state_codec import StateFormatError, decode, encode
from dpstream.storage import open_url, write_bytes_atomic
from dpstream.validation import check_name

__all__ = [
    "CheckpointPolicy",
    "Checkpoint",
    "CheckpointStore",
    "CheckpointError",
    "config_fingerprint",
    "new_checkpoint",
    "FORMAT_VERSION",
]

FORMAT_VERSION = 2  # bump when a state layout changes: older checkpoints are then refused
FILE_NAME = "checkpoint.npz"
LEGACY_FILE_NAME = "checkpoint.pkl"  # version 1 (pickle): refused


class CheckpointError(RuntimeError):
    """A checkpoint could not be written or does not belong to this run's configuration."""


class CheckpointMismatchError(CheckpointError, ValueError):
    """The run id's checkpoint was computed for another configuration, lake or shuffle: a bad input
    (the CLI's exit 2), never resumed."""


DEFAULT_EVERY_STEPS = 10  # the one default: the pipeline config's [checkpoint] reads it too


@dataclass(frozen=True)
class CheckpointPolicy:
    url: str
    every_steps: int = DEFAULT_EVERY_STEPS
    every_seconds: float | None = None  # also save when this long has passed since the last save
    storage_options: dict[str, Any] = field(default_factory=dict)
    retries: int = 5  # for failures other than an unreachable store (those wait out ``outage``)
    backoff_seconds: float = 0.5
    outage: OutagePolicy = field(default_factory=OutagePolicy)

    def __post_init__(self) -> None:
        if self.every_steps < 1:
            raise ValueError(f"every_steps must be a positive integer, got {self.every_steps!r}")
        if self.every_seconds is not None and not self.every_seconds > 0:
            raise ValueError(f"every_seconds must be > 0 or None, got {self.every_seconds!r}")
        if self.retries < 0 or self.backoff_seconds < 0:
            raise ValueError("retries and backoff_seconds must be >= 0")

    def due(self, done: int, num_steps: int, last_save: float) -> bool:
        """Whether to save after ``done`` of ``num_steps`` steps: every ``every_steps``, at the end, or once
        ``every_seconds`` have passed since the last save (``last_save``, a ``time.monotonic`` reading)."""
        return (
            done % self.every_steps == 0
            or done == num_steps
            or (self.every_seconds is not None and time.monotonic() - last_save >= self.every_seconds)
        )


@dataclass
class Checkpoint:
    run_id: str
    fingerprint: str
    step: int  # index of the next step to run
    state: Any
    noise_secret: bytes
    training_loss: list[float]
    created_at: str
    format_version: int = FORMAT_VERSION
    claim: str | None = None  # the ledger claim token of the run (LakeLedger.claim): a resume continues it
    data_version: str = ""  # what the run reads (the shuffle generation it pinned): a resume reads the same

    def __repr__(self) -> str:  # never print the secret
        return f"Checkpoint(run_id={self.run_id!r}, step={self.step}, fingerprint={self.fingerprint!r})"

    @property
    def key(self) -> NoiseKey:
        return NoiseKey.from_secret(self.noise_secret)


def config_fingerprint(algorithm: Any, model: Any, num_rows: int, num_params: int, lake: str = "") -> str:
    """Identity of what a run computes: algorithm and noise configuration, the model with every setting
    (its dataclass repr: a KAN's shape, activation, bounds and seed, a K-class model's K, the backend),
    data size and lake, checkpoint format and NumPy version (its Philox stream must match for bit-for-bit
    replay)."""
    document = repr((algorithm, model, num_rows, num_params, lake, FORMAT_VERSION, np.__version__))
    return hashlib.sha256(document.encode()).hexdigest()[:24]


class CheckpointStore:
    def __init__(self, policy: CheckpointPolicy):
        self.policy = policy
        self._fs, self._root = open_url(policy.url, policy.storage_options)

    def _path(self, run_id: str, name: str = FILE_NAME) -> str:
        return f"{self._root}/{check_name('run_id', run_id)}/{name}"

    def exists(self, run_id: str) -> bool:
        return bool(
            self._fs.exists(self._path(run_id)) or self._fs.exists(self._path(run_id, LEGACY_FILE_NAME))
        )

    def load(self, run_id: str) -> Checkpoint | None:
        path = self._path(run_id)
        try:
            if not self._fs.exists(path):
                if self._fs.exists(self._path(run_id, LEGACY_FILE_NAME)):
                    raise CheckpointError(
                        f"the checkpoint of run {run_id!r} at {self.policy.url} is in the old pickle format of an "
                        "earlier dpstream, which is not loaded (unpickling runs code); start a new run id (the "
                        "privacy it spent stays in the ledger)"
                    )
                return None
            with self._fs.open(path, "rb") as handle:
                data = handle.read()
            return _from_bytes(data, run_id)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as error:
            raise CheckpointError(
                f"cannot read the checkpoint at {self.policy.url}/{run_id}: {type(error).__name__}: {error}"
            ) from None

    def load_to_resume(
        self, run_id: str, fingerprint: str, lake: str, key: NoiseKey | None
    ) -> Checkpoint | None:
        """The checkpoint ``run_id`` resumes from (None: a fresh run), refused when it was written for another
        configuration, lake or code version (another ``fingerprint``: ``CheckpointMismatchError``) or when the
        caller passes another noise ``key`` than the checkpoint's (a resume replays the same noise)."""
        saved = self.load(run_id)
        if saved is None:
            return None
        if saved.fingerprint != fingerprint:
            other_data = bool(saved.data_version) and saved.data_version != lake
            what = (
                f"another lake or shuffle of it (it read {saved.data_version}, this run reads {lake})"
                if other_data
                else "another configuration (algorithm, budget or model settings) or dpstream/NumPy version"
            )
            raise CheckpointMismatchError(
                f"the checkpoint of run {run_id!r} was written for {what}: another configuration, lake, shuffle "
                "of the lake or code version than this run's; resume with the original settings and shuffled "
                "lake, or start a new run id"
            )
        if key is not None and key != saved.key:
            raise ValueError(
                f"run {run_id!r} resumes with the noise key of its checkpoint; do not pass another key"
            )
        return saved

    def data_version(self, run_id: str) -> str | None:
        """The data version recorded in ``run_id``'s checkpoint (the shuffle generation it pinned), or
        None without a checkpoint: a resumed run reads what it started on."""
        checkpoint = self.load(run_id)
        return None if checkpoint is None else checkpoint.data_version

    def delete(self, run_id: str) -> None:
        """Remove ``run_id``'s checkpoint (its noise key): for a run that gave its reservation back."""
        folder = f"{self._root}/{check_name('run_id', run_id)}"
        if self._fs.exists(folder):
            self._fs.rm(folder, recursive=True)

    def save(self, checkpoint: Checkpoint, *, exclusive: bool = False) -> None:
        """Write ``checkpoint`` atomically, waiting out an unreachable store (``policy.outage``) and retrying
        other storage errors ``policy.retries`` times. ``exclusive=True`` (a run's first checkpoint) raises
        ``CheckpointError`` when one already exists: another process started this run id at the same
        moment."""
        data = _to_bytes(checkpoint)
        self.policy.outage.call(
            lambda: self._write(checkpoint, data, exclusive),
            store=f"the checkpoint location {self.policy.url}",
            what=f"write the checkpoint of run {checkpoint.run_id!r} (step {checkpoint.step})",
        )

    def _write(self, checkpoint: Checkpoint, data: bytes, exclusive: bool) -> None:
        delay = self.policy.backoff_seconds
        for attempt in range(self.policy.retries + 1):
            try:
                # private: a checkpoint holds the noise key, readable by its owner only
                path = self._path(checkpoint.run_id)
                write_bytes_atomic(self._fs, path, data, exclusive=exclusive, private=True)
                return
            except FileExistsError:
                if exclusive and self._holds(checkpoint.run_id, data):
                    return  # our own exclusive write, whose answer was lost before an outage retry
                raise CheckpointError(
                    f"run {checkpoint.run_id!r} already has a checkpoint at {self.policy.url}: another process "
                    "started this run id at the same moment; use a new run id"
                ) from None
            except Exception as error:  # storage clients raise many types; all are retried alike
                if is_unreachable(error):
                    raise  # waited out by the outage policy
                if attempt == self.policy.retries:
                    raise CheckpointError(
                        f"could not write the checkpoint of run {checkpoint.run_id!r} (step {checkpoint.step}) to "
                        f"{self.policy.url} after {attempt + 1} attempts ({type(error).__name__}: {error}); the last "
                        "good checkpoint is intact: fix the storage (space, permissions, endpoint) and run the same "
                        "run id again to resume"
                    ) from None
                time.sleep(delay)
                delay *= 2

    def _holds(self, run_id: str, data: bytes) -> bool:
        try:
            return bool(self._fs.cat_file(self._path(run_id)) == data)
        except FileNotFoundError:  # an unreachable store raises: the outage policy waits for it
            return False


def new_checkpoint(
    run_id: str,
    fingerprint: str,
    step: int,
    state: Any,
    key: NoiseKey,
    losses: list[float],
    *,
    claim: str | None = None,
    data_version: str = "",
) -> Checkpoint:
    return Checkpoint(
        run_id=run_id,
        fingerprint=fingerprint,
        step=step,
        state=state,
        noise_secret=key.export_secret(),
        training_loss=list(losses),
        created_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        claim=claim,
        data_version=data_version,
    )


def _to_bytes(checkpoint: Checkpoint) -> bytes:
    tree, arrays = encode(checkpoint.state)
    meta = {
        "format_version": checkpoint.format_version,
        "run_id": checkpoint.run_id,
        "fingerprint": checkpoint.fingerprint,
        "step": checkpoint.step,
        "training_loss": [float(loss) for loss in checkpoint.training_loss],
        "created_at": checkpoint.created_at,
        "claim": checkpoint.claim,
        "data_version": checkpoint.data_version,
        "state": tree,
    }
    entries = {
        "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
        "noise_secret": np.frombuffer(checkpoint.noise_secret, dtype=np.uint8),
        **{f"state_{name}": array for name, array in arrays.items()},
    }
    buffer = io.BytesIO()
    np.savez(buffer, **entries)
    return buffer.getvalue()


def _from_bytes(data: bytes, run_id: str) -> Checkpoint:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        entries = {name: archive[name] for name in archive.files}
    meta = json.loads(entries.pop("meta").tobytes().decode())
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"the checkpoint of run {run_id!r} was written by an incompatible dpstream version "
            f"(format {meta.get('format_version')!r}, this version reads {FORMAT_VERSION}); start a new run id "
            "(the privacy it spent stays in the ledger)"
        )
    arrays = {name[len("state_") :]: array for name, array in entries.items() if name.startswith("state_")}
    try:
        state = decode(meta["state"], arrays)
    except StateFormatError as error:
        raise CheckpointError(f"the checkpoint of run {run_id!r} cannot be rebuilt: {error}") from None
    return Checkpoint(
        run_id=meta["run_id"],
        fingerprint=meta["fingerprint"],
        step=int(meta["step"]),
        state=state,
        noise_secret=entries["noise_secret"].tobytes(),
        training_loss=[float(loss) for loss in meta["training_loss"]],
        created_at=meta["created_at"],
        format_version=meta["format_version"],
        claim=meta.get("claim"),
        data_version=str(meta.get("data_version") or ""),
    )
