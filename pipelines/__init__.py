"""Dask data plane: Parquet lakes (local, S3), validation, shuffle-once with a manifest, and the
distributed step executor. Imports Dask, pyarrow, fsspec and dpstream; never Prefect."""

from pipelines.cluster import connect
from pipelines.executor import DaskExecutor, lake_blocks
from pipelines.lake import LakeError, LakeSpec
from pipelines.manifest import Manifest, verify_parts
from pipelines.shuffle import prune_shuffles, read_manifest, shuffle_once
from pipelines.streaming import choose_mode, prefetched_blocks
from pipelines.train import train_on_lake
from pipelines.validate import LakeSummary, validate_lake
from pipelines.waiting import NoWorkersError

__all__ = [
    "LakeError",
    "LakeSpec",
    "LakeSummary",
    "validate_lake",
    "shuffle_once",
    "Manifest",
    "read_manifest",
    "prune_shuffles",
    "verify_parts",
    "NoWorkersError",
    "DaskExecutor",
    "lake_blocks",
    "prefetched_blocks",
    "choose_mode",
    "train_on_lake",
    "connect",
]
