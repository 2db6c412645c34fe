"""Dask data plane: lakes (Parquet folders, Delta and Iceberg tables; local, S3), validation,
shuffle-once with a manifest, and the distributed step executor. Imports Dask, pyarrow, fsspec and dpstream; never Prefect."""

# Each table format declares itself as it is imported (dpstream.pipelines.sources.formats).
from dpstream.pipelines.errors import LakeError
from dpstream.pipelines.execution.cluster import connect
from dpstream.pipelines.execution.executor import DaskExecutor, lake_blocks
from dpstream.pipelines.execution.streaming import choose_mode, prefetched_blocks
from dpstream.pipelines.execution.train import plan_on_lake, train_on_lake
from dpstream.pipelines.lake.spec import LakeSpec
from dpstream.pipelines.shuffle.manifest import Manifest, verify_parts
from dpstream.pipelines.shuffle.once import prune_shuffles, read_manifest, shuffle_once
from dpstream.pipelines.shuffle.users import UserBounding
from dpstream.pipelines.sources import delta, iceberg  # noqa: F401
from dpstream.pipelines.sources.protocol import SourceVersion, open_source
from dpstream.pipelines.sources.spec import SourceSpec
from dpstream.pipelines.validation.validate import LakeSummary, validate_lake
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
