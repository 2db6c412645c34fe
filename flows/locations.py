"""Where a pipeline reads and writes, and the one rule every write location is checked by.

A config names the source lake (read only), the shuffled lake, the ledger and the checkpoints; a run
adds its publish folder (``runs/<run id>``: releases only), its operator folder (``operator/<run id>``:
non-private metrics and plots) and its log file. ``dpstream.locations.check_write_location`` checks each
against the others, so a setting that would write into a lake, a ledger or a published folder is
refused, with the key and the fix, before anything is written: at config load for the config's own
locations (``validate``, ``shuffle`` and ``train`` refuse the same configs), and when a run starts for
the per-run ones.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from dpstream.locations import Protected, check_write_location

if TYPE_CHECKING:
    from dpstream.flows.config import PipelineConfig

__all__ = [
    "RunLocations",
    "run_locations",
    "check_config_locations",
    "check_log_location",
    "protected_locations",
    "checkpoint_root",
    "CHECKPOINTS_UNDER_LEDGER",
]

CHECKPOINTS_UNDER_LEDGER = "_checkpoints"


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


def _places(config: PipelineConfig, folder: str) -> dict[str, Protected]:
    """The locations a config names, each as the rule protects it."""
    return {
        "lake": Protected(config.lake.url, "the source lake (lake.url)"),
        "shuffled": Protected(config.lake.shuffled_url, "the shuffled lake (lake.shuffled_url)"),
        "ledger": Protected(config.budget.ledger_url, "the privacy ledger (budget.ledger_url)"),
        "checkpoints": Protected(checkpoint_root(config), "the checkpoints (checkpoint.url)"),
        "folder": Protected(folder, "the pipeline config's folder", inside_ok=True),
    }


def _refused(error: ValueError):
    from dpstream.flows.config import ConfigError

    return ConfigError(str(error))


def check_config_locations(config: PipelineConfig, folder: str) -> None:
    """The config's own locations against each other (``ConfigError``): the shuffled lake, the ledger and
    the checkpoints never overlap the source lake or one another (the default checkpoints lie inside the
    ledger), and none of them is, or contains, the config's folder."""
    from dataclasses import replace

    from dpstream.pipelines.shuffle import check_output_location

    places = _places(config, folder)
    try:
        check_output_location(config.lake.shuffled_url, config.lake.url, protected=(folder,))
        check_write_location(
            places["shuffled"].url, "lake.shuffled_url", [places["ledger"], places["checkpoints"]], scan=False
        )
        check_write_location(
            places["ledger"].url,
            "budget.ledger_url",
            [places["lake"], places["shuffled"], places["folder"]],
            scan=False,
        )
        check_write_location(
            places["checkpoints"].url,
            "checkpoint.url",
            [places["lake"], places["shuffled"], places["folder"], replace(places["ledger"], inside_ok=True)],
            scan=False,
        )
    except ValueError as error:
        raise _refused(error) from None


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
    from dpstream.flows.config import config_folder

    folder = config_folder(config_path)
    output = output or f"{folder}/runs/{run_id}"
    operator = operator or f"{folder}/operator/{run_id}"
    checkpoints = checkpoint_root(config)
    protected = list(_places(config, folder).values())
    try:
        check_write_location(output, "--output (the publish folder)", protected)
        check_write_location(
            operator,
            "--operator-output (the operator folder)",
            protected + [Protected(output, "the publish folder (--output)")],
        )
        _check_own_folder(output, "--output (the publish folder)", "model.json", run_id)
        _check_own_folder(operator, "--operator-output (the operator folder)", "metrics.json", run_id)
    except ValueError as error:
        raise _refused(error) from None
    return RunLocations(output=output, operator=operator, checkpoints=checkpoints)


def _check_own_folder(url: str, setting: str, record: str, run_id: str) -> None:
    """A run writes into a new or empty folder, or into its own: one that holds this run id's ``record``
    (a repeated or resumed run republishes the same model). Another run's release, or anything else, is
    never overwritten."""
    from dpstream.storage import open_url, read_json

    fs, root = open_url(url)
    if not fs.exists(root):
        return
    if not fs.isdir(root):
        raise ValueError(f"{setting} {url} is a file; choose a folder")
    names = sorted(posixpath.basename(path.rstrip("/")) for path in fs.ls(root, detail=False))
    if not names:
        return
    owner = None
    if record in names:
        try:
            owner = read_json(fs, f"{root}/{record}").get("run_id")
        except (ValueError, AttributeError, OSError):
            owner = None
    if owner == run_id:
        return
    holds = f"the release of run {owner!r}" if owner is not None else f"other files ({', '.join(names[:3])})"
    raise ValueError(
        f"{setting} {url} holds {holds}; a run writes only into a new or empty folder or its own, so nothing "
        "was written. Choose another location (the default is runs/<run id> beside the config)"
    )


def protected_locations(config: PipelineConfig, config_path: str | Path) -> list[Protected]:
    """Every location ``config`` names, as ``check_write_location`` protects it."""
    from dpstream.flows.config import config_folder

    return list(_places(config, config_folder(config_path)).values())


def check_log_location(
    log_folder: str, config: PipelineConfig | None = None, config_path: str | None = None
) -> None:
    """The log folder ($DPSTREAM_LOG_DIR) is a write location too: never inside a lake or a ledger."""
    protected = []
    if config is not None and config_path is not None:
        from dpstream.flows.config import config_folder

        protected = list(_places(config, config_folder(config_path)).values())
    check_write_location(log_folder, "the log folder ($DPSTREAM_LOG_DIR)", protected)
