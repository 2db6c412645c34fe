"""A run's ledger claim: made fresh or continued from its checkpoint, and given back by a run that failed
before its first release (``dpstream.coordinator.execute``)."""

from __future__ import annotations

from dpstream.algorithms.base import PrivacyReport
from dpstream.checkpoint import Checkpoint, CheckpointPolicy, CheckpointStore
from dpstream.privacy import LakeLedger, RunIdReusedError

__all__ = ["claim_run", "give_back"]


def claim_run(
    ledger: LakeLedger | None,
    run_id: str | None,
    report: PrivacyReport,
    saved: Checkpoint | None,
    checkpoint: CheckpointPolicy | None,
    lake: str,
) -> tuple[str | None, bool]:
    """(the run's ledger claim token, whether this call made the claim): a fresh claim, or the one its
    checkpoint continues (charged once)."""
    if ledger is None:
        return (None if saved is None else saved.claim), False
    charge = dict(
        mechanism=report.mechanism,
        relation=report.relation,
        data_version=lake or None,
        unit=report.ledger_unit,
    )
    if saved is None:
        try:
            return ledger.claim(run_id, report.mu, **charge).claim, True
        except RunIdReusedError as refused:
            where = (
                f"at {checkpoint.url}" if checkpoint is not None else "(this run has no checkpoint location)"
            )
            raise RunIdReusedError(f"{refused} (its checkpoint is not {where})") from None
    entry = ledger.entry(run_id)
    if entry is None:  # gave its reservation back earlier and kept its checkpoint: claim again, same key
        return ledger.claim(run_id, report.mu, **charge).claim, True
    if saved.claim is not None and entry.claim is not None and entry.claim != saved.claim:
        raise RunIdReusedError(
            f"the checkpoint of run {run_id!r} belongs to another claim of that run id than the ledger's entry "
            f"(reserved {entry.reserved_at}): it cannot resume it. Use a new run id"
        )
    return ledger.reserve(run_id, report.mu, **charge).claim, False


def give_back(
    ledger: LakeLedger | None,
    store: CheckpointStore | None,
    run_id: str | None,
    claim: str | None,
    error: BaseException,
) -> None:
    """A run that claimed its run id here and failed before its first release: the reservation back, and
    the checkpoint it wrote (the key) deleted once the reservation is gone (never another claim's)."""
    reason = f"{type(error).__name__}: {error}".strip()
    try:
        given_back = ledger.abort(run_id, claim, reason or "interrupted") if ledger is not None else True
        if given_back and store is not None:
            store.delete(run_id)
    except Exception:  # noqa: BLE001 - the run's own error is the one to report; the charge then stays
        pass
