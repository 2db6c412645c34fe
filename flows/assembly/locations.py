"""Where a pipeline reads and writes, and the one rule every write location is checked by.

A config names the source lake (read only), the shuffled lake, the ledger and the checkpoints; a run
adds its publish folder (``runs/<run id>``: releases only), its operator folder (``operator/<run id>``:
non-private metrics and plots) and its log file. ``dpstream.locations.check_write_location`` checks each
against the others, so a setting that would write into a lake, a ledger or a published folder is
refused, with the key and the fix, before anything is written: at config load for the config's own
locations (``dpstream.flows.assembly.loading.check_config_locations``: ``validate``, ``shuffle`` and
``train`` refuse the same configs), and when a run starts for the per-run ones.

**A run's folders are its own.** Once its plan fits the budget, and before anything is charged, a run
claims its publish and operator folders by creating a claim document in each *exclusively* (``O_EXCL``
on disk, a conditional PUT on an object store: the ledger's run-id rule) naming its run id and its lake.
A later run writes there only with the same run id on the same lake (a resume or a retried flow run,
which republishes the same release); any other is refused, naming the folder and ``--output``, so a
release is never replaced by another lake's model that happens to share a run id, and two runs racing for
one folder cannot both have it. The claims also mark the folders, so no other command writes inside them
(``dpstream.locations.DATA_MARKERS``).
"""

from __future__ import annotations

import functools
import os
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from dpstream.flows.config.file import ConfigError, config_folder
from dpstream.locations import OPERATOR_CLAIM, RELEASE_CLAIM, Protected, check_write_location
from dpstream.outages import OutagePolicy
from dpstream.storage import is_local, open_url, read_json, write_json_atomic

if TYPE_CHECKING:
    from dpstream.flows.config.pipeline import PipelineConfig

__all__ = [
    "RELEASE_CLAIM",
    "OPERATOR_CLAIM",
    "claim_run_folders",
    "claims_given_back_on_failure",
    "FolderClaims",
    "check_release_folder",
    "record_release",
    "RELEASE_FILES",
    "RunLocations",
    "run_locations",
    "config_places",
    "check_log_location",
    "protected_locations",
    "checkpoint_root",
    "CHECKPOINTS_UNDER_LEDGER",
]

CHECKPOINTS_UNDER_LEDGER = "_checkpoints"
# What a publish folder may hold: the release (flows.publish_task) and the run's claim.
RELEASE_FILES = frozenset(
    {"model.json", "privacy_report.md", "clip_norm.png", "epsilon_delta.png", RELEASE_CLAIM}
)
_PUBLISH = "--output (the publish folder)"
_OPERATOR = "--operator-output (the operator folder)"


class RunLocations(BaseModel):
    """Where one run writes: the publish folder (releases only), the operator folder (non-private
    metrics and plots) and the private checkpoint location (the noise key)."""

    model_config = ConfigDict(frozen=True)
    output: str
    operator: str
    checkpoints: str


def checkpoint_root(config: PipelineConfig) -> str:
    """``checkpoint.url``, default ``<budget.ledger_url>/_checkpoints``: private like the ledger."""
    if config.checkpoint:
        return config.checkpoint.url
    return f"{config.budget.ledger_url.rstrip('/')}/{CHECKPOINTS_UNDER_LEDGER}"


def config_places(config: PipelineConfig, folder: str) -> dict[str, Protected]:
    """The locations a config names, each as the rule protects it."""
    return {
        "lake": Protected(config.lake.url, "the source lake (lake.url)"),
        "shuffled": Protected(config.lake.shuffled_url, "the shuffled lake (lake.shuffled_url)"),
        "ledger": Protected(config.budget.ledger_url, "the privacy ledger (budget.ledger_url)"),
        "checkpoints": Protected(checkpoint_root(config), "the checkpoints (checkpoint.url)"),
        "folder": Protected(folder, "the pipeline config's folder", inside_ok=True),
    }


def _refused(error: ValueError) -> ConfigError:
    return ConfigError(str(error))


def run_locations(
    config: PipelineConfig,
    config_path: str | Path,
    run_id: str,
    output: str | None = None,
    operator: str | None = None,
) -> RunLocations:
    """The run's publish folder (default ``runs/<run id>`` beside the config), operator folder (default
    ``operator/<run id>`` beside it) and checkpoint location (``checkpoint_root``).

    Raises ``ConfigError`` when the publish or operator folder would write into, or contain, the source
    lake, the shuffled lake, the ledger or the checkpoints (a checkpoint holds the noise key), lie in a
    data location (``dpstream.locations``), or overlap each other."""
    folder = config_folder(config_path)
    output = output or f"{folder}/runs/{run_id}"
    operator = operator or f"{folder}/operator/{run_id}"
    checkpoints = checkpoint_root(config)
    protected = list(config_places(config, folder).values())
    try:
        check_write_location(output, _PUBLISH, protected, own_marker=RELEASE_CLAIM)
        check_write_location(
            operator,
            _OPERATOR,
            protected + [Protected(output, "the publish folder (--output)")],
            own_marker=OPERATOR_CLAIM,
        )
        _check_own_folder(output, _PUBLISH, RELEASE_CLAIM, "model.json", run_id)
        _check_own_folder(operator, _OPERATOR, OPERATOR_CLAIM, "metrics.json", run_id)
    except ValueError as error:
        raise _refused(error) from None
    return RunLocations(output=output, operator=operator, checkpoints=checkpoints)


def _check_own_folder(url: str, setting: str, claim: str, record: str, run_id: str) -> None:
    """A run writes into a new or empty folder, or into its own: one its run id claimed (``claim``), or,
    written before runs claimed folders, one whose ``record`` names this run id. Another run's release, or
    anything else, is never overwritten. Which lake the run id belongs to is checked when the run claims
    the folder (``claim_run_folders``), once the lake is known."""
    fs, root = open_url(url)
    if not fs.exists(root):
        return
    if not fs.isdir(root):
        raise ValueError(f"{setting} {url} is a file; choose a folder")
    names = sorted(posixpath.basename(path.rstrip("/")) for path in fs.ls(root, detail=False))
    if not names:
        return
    owned_by = claim if claim in names else record if record in names else None
    owner = _recorded(fs, f"{root}/{owned_by}", "run_id") if owned_by else None
    if owner == run_id:
        return
    holds = f"the release of run {owner!r}" if owner is not None else f"other files ({', '.join(names[:3])})"
    raise ValueError(
        f"{setting} {url} holds {holds}; a run writes only into a new or empty folder or its own, so nothing "
        "was written. Choose another location (the default is runs/<run id> beside the config)"
    )


def check_release_folder(url: str) -> None:
    """Refuse (``ValueError``) a publish folder that holds anything but a release (``RELEASE_FILES``): what
    else lies there (predictions, notes) could be mistaken for, or shipped as, part of the release."""
    fs, root = open_url(url)
    names = sorted(posixpath.basename(path.rstrip("/")) for path in fs.ls(root, detail=False))
    # A ".tmp-" file is a write an interrupted run never renamed into place: not part of anything.
    others = [name for name in names if name not in RELEASE_FILES and not name.startswith(".tmp-")]
    if others:
        raise ValueError(
            f"{url} holds files that are not part of a release ({', '.join(others[:5])}"
            f"{', …' if len(others) > 5 else ''}): a publish folder holds a run's releases only, and a reader "
            "cannot tell what else was published. Move them out of the folder, then run `dpstream report` again"
        )
    claim = _recorded(fs, f"{root}/{RELEASE_CLAIM}", "released") if RELEASE_CLAIM in names else []
    missing = ["all of it"] if claim is None else [name for name in claim if name not in names]
    if missing:
        raise ValueError(
            f"{url} holds an incomplete release (missing: {', '.join(missing)}): its run stopped while "
            "publishing. Run the same `dpstream train` command with its run id again: it publishes the same "
            "release whole, charged nothing more"
        )


def record_release(
    url: str, file_names: list[str], outage: OutagePolicy | None = None, storage_options: dict | None = None
) -> None:
    """Write into the publish folder's claim which files its release holds, as the publish's last write:
    a folder whose claim lists nothing, or files that are not there, holds an incomplete release."""
    fs, root = open_url(url, storage_options)
    path = f"{root}/{RELEASE_CLAIM}"

    def write() -> None:
        write_json_atomic(fs, path, {**read_json(fs, path), "released": sorted(file_names)})

    (outage or OutagePolicy()).call(write, store=url, what="record its release")


def _recorded(fs: Any, path: str, key: str) -> Any:
    # Only a missing or unreadable document means "no owner recorded"; a store that cannot be reached
    # raises, so the outage policy waits for it instead of refusing the folder.
    try:
        return read_json(fs, path).get(key)
    except (FileNotFoundError, ValueError, AttributeError):
        return None


@dataclass(frozen=True)
class FolderClaims:
    """The claims one ``claim_run_folders`` call created, as (filesystem, path of the claim)."""

    made: tuple[tuple[Any, str], ...] = ()

    def give_back(self) -> None:
        """Remove each claim whose folder holds nothing else (and the folder, then empty): a run that ends
        before it published anything leaves no folder behind. A folder holding part of a release keeps
        its claim, so only its own run completes it."""
        for fs, path in self.made:
            folder = posixpath.dirname(path)
            try:
                fs.invalidate_cache(folder)
                if [name for name in fs.ls(folder, detail=False) if name.rstrip("/") != path] == []:
                    fs.rm(path)
                    if is_local(fs):
                        os.rmdir(folder)
            except OSError:  # the claim then stays, naming this run id and lake: only this run uses it
                pass


@contextmanager
def claims_given_back_on_failure(claims: FolderClaims) -> Iterator[None]:
    """Within the block, an exception gives the run's folder claims back (``FolderClaims.give_back``)."""
    try:
        yield
    except BaseException:
        claims.give_back()
        raise


def claim_run_folders(
    locations: RunLocations, run_id: str, lake_fingerprint: str, outage: OutagePolicy | None = None
) -> FolderClaims:
    """Claim the run's publish and operator folders for ``run_id`` on the lake ``lake_fingerprint`` (module
    docstring): ``ConfigError`` naming the folder and the fix when another run or lake holds one. Returns
    the claims this call created; they are taken back when the other folder is refused, so a refused run
    holds no folder."""
    document = {"format": "dpstream-run-folder/1", "run_id": run_id, "lake_fingerprint": lake_fingerprint}
    created: list[tuple[Any, str]] = []
    try:
        for url, setting, claim, record in (
            (locations.output, _PUBLISH, RELEASE_CLAIM, "model.json"),
            (locations.operator, _OPERATOR, OPERATOR_CLAIM, "metrics.json"),
        ):
            fs, root = open_url(url)
            owner, made = (outage or OutagePolicy()).call(
                functools.partial(_claim, fs, root, claim, record, document),
                store=f"{setting} {url}",
                what=f"claim it for run {run_id!r}",
            )
            if made:
                created.append((fs, f"{root}/{claim}"))
            if owner != (run_id, lake_fingerprint):
                raise _refused(ValueError(_taken(setting, url, owner, run_id, lake_fingerprint)))
    except BaseException:
        FolderClaims(tuple(created)).give_back()
        raise
    return FolderClaims(tuple(created))


def _taken(setting: str, url: str, owner: tuple[Any, Any], run_id: str, lake_fingerprint: str) -> str:
    whose = f"run {owner[0]!r} of lake {owner[1]}" if owner[0] is not None else "another run"
    return (
        f"{setting} {url} holds the release of {whose}; this run ({run_id!r} of lake {lake_fingerprint}) would "
        "replace it, so nothing was charged or written. Choose another folder with --output and "
        "--operator-output (or another --run-id, whose default folders are runs/<run id> and "
        "operator/<run id> beside the config)"
    )


def _claim(fs: Any, root: str, claim: str, record: str, document: dict) -> tuple[tuple[Any, Any], bool]:
    """((run id, lake) of the folder's owner, whether this call created its claim): ``document`` becomes
    the folder's claim when it had none."""
    path = f"{root}/{claim}"
    ours = (document["run_id"], document["lake_fingerprint"])
    if not fs.exists(path) and fs.exists(f"{root}/{record}"):
        # A folder published before runs claimed theirs: its model.json names its lake; an operator
        # folder's metrics.json only its run id.
        legacy = (
            _recorded(fs, f"{root}/{record}", "run_id"),
            _recorded(fs, f"{root}/{record}", "lake_fingerprint"),
        )
        if legacy[0] != ours[0] or legacy[1] not in (None, ours[1]):
            return legacy, False
    try:
        write_json_atomic(fs, path, document, exclusive=True)
        made = True
    except FileExistsError:
        made = False
    return (_recorded(fs, path, "run_id"), _recorded(fs, path, "lake_fingerprint")), made


def protected_locations(config: PipelineConfig, config_path: str | Path) -> list[Protected]:
    """Every location ``config`` names, as ``check_write_location`` protects it."""
    return list(config_places(config, config_folder(config_path)).values())


def check_log_location(
    log_folder: str, config: PipelineConfig | None = None, config_path: str | None = None
) -> None:
    """The log folder ($DPSTREAM_LOG_DIR) is a write location too: never inside a lake or a ledger."""
    protected = []
    if config is not None and config_path is not None:
        protected = list(config_places(config, config_folder(config_path)).values())
    check_write_location(log_folder, "the log folder ($DPSTREAM_LOG_DIR)", protected)
