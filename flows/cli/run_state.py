"""What a ``train`` run stopped by a signal holds, said in the command's last line
(``stopped_run_message``): nothing charged, a reservation kept until the run resumes, or a finished run."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from dpstream.checkpoint import FILE_NAME
from dpstream.flows.assembly.locations import checkpoint_root
from dpstream.flows.config.pipeline import PipelineConfig
from dpstream.storage import open_url, read_json
from dpstream.unreleased import give_back_all

__all__ = ["stopped_run_message"]


def stopped_run_message(
    config: PipelineConfig, run_id: str, log_file: Path | str | None, resume: str, timeout: float = 3.0
) -> Callable[[], str]:
    """The line of a ``train`` run stopped by a signal, as a function asked at that moment: it says what
    the ledger then holds for the run and what to do. The process exits without unwinding, so a run that
    holds a claim no step has used gives it back first (``dpstream.unreleased``: its entry moves to
    ``aborted/``, its checkpoint is deleted); a reservation a step used stays until the run is resumed
    from its checkpoint. When the ledger cannot be read within ``timeout`` seconds (an object store out of
    reach), the line says what holds either way."""
    stopped = f"run {run_id} stopped (log: {log_file})"

    def message() -> str:
        status, saved = _within(timeout, lambda: _given_back_then_state(config, run_id))
        if status is None and saved is not None:
            return f"{stopped} before it charged the ledger: nothing is charged for it; start it again with: {resume}"
        if status == "committed":
            return (
                f"{stopped} after it finished (its ledger entry is committed); its model is published again, "
                f"charged nothing more, with: {resume}"
            )
        if status == "reserved" and saved is False:
            return (
                f"{stopped} after it reserved its charge but before its first checkpoint: the reservation stays "
                "in the ledger, counted against the lake's budget, and this run id cannot resume; train again "
                f"with a new --run-id (`dpstream budget show` lists the reservation)"
            )
        held = (
            "its ledger charge stays reserved"
            if status == "reserved"
            else "a ledger charge it reserved stays reserved"
        )
        return (
            f"{stopped}; {held}, counted against the lake's budget, until the run is resumed from its "
            f"checkpoint (charged once) with: {resume}"
        )

    return message


def _given_back_then_state(config: PipelineConfig, run_id: str) -> tuple[str | None, bool]:
    give_back_all("stopped by a signal before its first release")
    return _run_state(config, run_id)


def _run_state(config: PipelineConfig, run_id: str) -> tuple[str | None, bool]:
    """(the status of ``run_id``'s ledger entry, or None without one; whether its checkpoint exists)."""
    fs, root = open_url(config.budget.ledger_url)
    fs.invalidate_cache(root)
    entries = fs.glob(f"{root.rstrip('/')}/*/runs/{run_id}.json")
    status = read_json(fs, entries[0]).get("status") if entries else None
    fs, root = open_url(checkpoint_root(config))
    return status, bool(fs.exists(f"{root.rstrip('/')}/{run_id}/{FILE_NAME}"))


def _within(timeout: float, question: Callable[[], tuple]) -> tuple:
    """``question()``'s answer, or (None, None) when it fails or takes longer than ``timeout`` seconds."""
    answer: list[tuple] = []

    def ask() -> None:
        try:
            answer.append(question())
        except Exception:  # noqa: BLE001 - an unreadable ledger leaves the line that holds either way
            pass

    thread = threading.Thread(target=ask, name="dpstream-ledger-state", daemon=True)
    thread.start()
    thread.join(timeout)
    return answer[0] if answer else (None, None)
