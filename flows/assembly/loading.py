"""Loading a pipeline config as every entry point loads it: ``validate``, ``shuffle``, ``train``, ``serve``
and the flows refuse the same configs, each error naming the file, the key and the fix.

``load_inputs`` reads the file against the schema (``dpstream.flows.config.pipeline.read_config``), builds
the run's inputs once (``RunInputs.of``: the data plane's checks of the lake's source and of
``[preprocess]``), checks the cluster class, then the config's own locations against each other: the
shuffled lake, the ledger and the checkpoints never overlap the source lake or one another, and none of
them is, or contains, the config's folder (a shuffle there could overwrite or delete the lake or the
project), all before anything runs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dpstream.flows.assembly.cluster import check_cluster
from dpstream.flows.assembly.inputs import RunInputs
from dpstream.flows.assembly.locations import config_places
from dpstream.flows.config.file import ConfigError, config_folder
from dpstream.flows.config.pipeline import PipelineConfig, read_config
from dpstream.locations import check_write_location
from dpstream.pipelines.shuffle.location import check_output_location

__all__ = ["load_inputs", "load_config", "check_config_locations"]


def load_inputs(path: str | Path) -> RunInputs:
    """Read, validate and check the pipeline config at ``path`` (module docstring) and build its inputs;
    ``ConfigError`` names the file and each offending key. ``path`` may be a URL such as
    s3://bucket/jobs/pipeline.toml."""
    config = read_config(path)
    try:
        inputs = RunInputs.of(config)
        check_cluster(config.cluster)
        check_config_locations(config, config_folder(path))
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    return inputs


def load_config(path: str | Path) -> PipelineConfig:
    """The pipeline config at ``path``, checked whole as ``load_inputs`` checks it, for a caller that reads
    only its sections."""
    return load_inputs(path).config


def check_config_locations(config: PipelineConfig, folder: str) -> None:
    """The config's own locations against each other (``ConfigError``): the shuffled lake, the ledger and
    the checkpoints never overlap the source lake or one another (the default checkpoints lie inside the
    ledger), and none of them is, or contains, the config's folder."""
    places = config_places(config, folder)
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
        raise ConfigError(str(error)) from None
