"""Dask data plane: lakes (Parquet folders, Delta and Iceberg tables; local, S3), validation,
shuffle-once with a manifest, and the distributed step executor. Imports Dask, pyarrow, fsspec and dpstream; never Prefect."""

# Each table format declares itself as it is imported (dpstream.pipelines.source_formats).
from dpstream.pipelines import delta_source, iceberg_source  # noqa: F401
from dpstream.pipelines.cluster import connect
from dpstream.pipelines.executor import DaskExecutor, lake_blocks
from dpstream.pipelines.lake import LakeError, LakeSpec, SourceSpec
from dpstream.pipelines.manifest import Manifest, verify_parts
from dpstream.pipelines.shuffle import prune_shuffles, read_manifest, shuffle_once
from dpstream.pipelines.sources import SourceVersion, open_source
from dpstream.pipelines.streaming import choose_mode, prefetched_blocks
from dpstream.pipelines.train import plan_on_lake, train_on_lake
from dpstream.pipelines.user_shuffle import UserBounding
from dpstream.pipelines.validate import LakeSummary, validate_lake
from dpstream.pipelines.waiting import NoWorkersError

__all__ = [
    "LakeError",
    "LakeSpec",
    "SourceSpec",
    "SourceVersion",
    "open_source",
    "LakeSummary",
    "validate_lake",
    "shuffle_once",
    "UserBounding",
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
    "plan_on_lake",
    "connect",
]
