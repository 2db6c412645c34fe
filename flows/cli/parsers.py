"""The arguments of the ``dpstream`` commands, declared apart from the commands that run them so that
``dpstream --help``, a command's ``--help`` and an argument error load nothing heavy: argparse and the
run-id rule only. The dispatcher (``dpstream.flows.cli.main.COMMANDS``) pairs each command with its
arguments here (or in ``dpstream.flows.cli.budget``) and with the module that runs it."""

from __future__ import annotations

import argparse

from dpstream.validation import check_name

__all__ = [
    "validate_arguments",
    "convert_arguments",
    "predict_arguments",
    "report_arguments",
    "shuffle_arguments",
    "train_arguments",
    "serve_arguments",
    "demo_arguments",
]


def validate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def convert_arguments(parser: argparse.ArgumentParser) -> None:
    """``dpstream convert CSV OUT``: the CSV's columns and what is written, the public preprocessing
    policies, and the private bounds of the columns without a public range."""
    _convert_inputs(parser)
    _convert_policies(parser)
    _convert_private_bounds(parser)
    parser.add_argument("--unknown-category", choices=["error", "drop"], default="error")
    parser.add_argument("--rows-per-file", type=int, default=250_000)


def _convert_inputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("csv")
    parser.add_argument("out")
    parser.add_argument(
        "--columns",
        nargs="+",
        default=None,
        help="numeric feature columns to keep (default: every numeric column not named elsewhere or in --drop)",
    )
    parser.add_argument("--label", required=True)
    parser.add_argument(
        "--label-classes",
        default=None,
        metavar="A,B,C",
        help="the label's public class list: each label is written as its position (other values are refused, "
        "or dropped with --unknown-category drop), and the config's model is logistic over these classes",
    )
    parser.add_argument(
        "--id",
        nargs="*",
        default=[],
        metavar="COLUMN",
        help="columns carried into the lake untouched (never features)",
    )
    parser.add_argument(
        "--user",
        default=None,
        metavar="COLUMN",
        help="the column naming a person (a customer, patient, device): carried into the lake like --id, the "
        "private bounds sample every 10th person (all their rows, each person weighing one row), and the "
        "written config protects people ([privacy] unit = 'user')",
    )
    parser.add_argument(
        "--drop-missing-ids",
        action="store_true",
        help="with --user: leave out the rows without a person id (counted and printed) instead of refusing them",
    )
    parser.add_argument(
        "--drop", nargs="*", default=[], metavar="COLUMN", help="columns left out of the default --columns"
    )
    parser.add_argument(
        "--no-intercept",
        action="store_true",
        help="no constant feature 'intercept' = 1 (written by default so a model has an intercept)",
    )
    parser.add_argument(
        "--config",
        default=None,
        metavar="PATH",
        help="where to write the ready pipeline config (default: pipeline.toml beside the lake; never overwritten)",
    )
    parser.add_argument("--no-config", action="store_true", help="write no pipeline config")


def _convert_policies(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--missing", choices=["drop", "impute"], default="drop")
    parser.add_argument(
        "--impute", nargs="*", default=[], metavar="COLUMN=VALUE", help="public imputation constants"
    )
    parser.add_argument(
        "--categorical", nargs="*", default=[], metavar="COLUMN=A,B,C", help="public category lists (one-hot)"
    )
    parser.add_argument(
        "--bounds",
        nargs="*",
        default=[],
        metavar="COLUMN=LOW,HIGH",
        help="public ranges: clip to [LOW, HIGH] and map onto --scale-range",
    )
    parser.add_argument(
        "--unscaled",
        nargs="*",
        default=[],
        metavar="COLUMN",
        help="numeric columns already on the public scale, kept as they are (every other numeric "
        "column, the label included, gets --bounds or private bounds)",
    )
    parser.add_argument(
        "--scale-range",
        nargs=2,
        type=float,
        default=[-1.0, 1.0],
        metavar=("LOW", "HIGH"),
        help="the range bounded columns are mapped onto (default -1 1, the public scale the "
        "algorithms' row bounds and steps assume)",
    )


def _convert_private_bounds(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--private-bounds",
        nargs="*",
        default=[],
        metavar="COLUMN",
        help="the columns whose bounds are estimated with DP from every 10th row, which is then left out of the "
        "lake (the lake's ledger is not charged; model.json states the guarantee). Default: every numeric column "
        "with neither --bounds nor --unscaled",
    )
    parser.add_argument(
        "--public-bounds-only",
        action="store_true",
        help="refuse a numeric column without --bounds or --unscaled instead of estimating its bounds privately "
        "(every row then goes into the lake)",
    )
    parser.add_argument(
        "--private-epsilon", type=float, default=1.0, help="ε of the private bounds (default 1)"
    )
    parser.add_argument(
        "--private-delta", type=float, default=1e-6, help="δ of the private bounds (default 1e-6)"
    )


def predict_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("model", help="model.json of a run (or the run's folder)")
    parser.add_argument(
        "lake",
        help="the lake to score: a Parquet folder, or a Delta or Iceberg table's location (its live rows); "
        "features as in the training lake, any column order",
    )
    parser.add_argument("out", help="a new location for the predictions (one file per lake file)")
    parser.add_argument(
        "--format",
        choices=["parquet", "delta"],
        default="parquet",
        help="write the predictions as Parquet files (default) or as a new Delta table (one commit)",
    )
    parser.add_argument(
        "--version",
        type=int,
        default=None,
        help="score this version of a Delta table (or this snapshot id of an Iceberg table); default the latest",
    )
    parser.add_argument(
        "--keep",
        nargs="*",
        default=[],
        metavar="COLUMN",
        help="lake columns to copy beside the predictions (an id)",
    )
    parser.add_argument(
        "--scheduler", default=None, help="a Dask scheduler address (default: a LocalCluster)"
    )
    parser.add_argument("--workers", type=int, default=2, help="LocalCluster workers (default 2)")
    parser.add_argument(
        "--memory-limit", default="2GiB", help="LocalCluster memory per worker (default 2GiB)"
    )


def report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="the run's output folder (holds model.json)")
    parser.add_argument(
        "--operator",
        default=None,
        metavar="DIR",
        help="the run's operator folder (operator/<run id> beside the config by default): also print its "
        "non-private held-out metric beside the baseline",
    )


def shuffle_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument(
        "--reshuffle",
        action="store_true",
        help="shuffle again as a new generation (e.g. after changing lake.rows_per_file or the lake); runs "
        "that pinned an earlier generation keep reading it",
    )
    parser.add_argument(
        "--prune",
        action="store_true",
        help="delete superseded generations and unfinished shuffles (a run still reading one then stops)",
    )


def _run_id(value: str) -> str:
    """argparse's check of --run-id: refused (exit 2) before anything is written."""
    try:
        return check_name("--run-id", value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config")
    parser.add_argument(
        "--run-id",
        default=None,
        type=_run_id,
        help="resume or name the run: 1-64 letters, digits, '.', '_' or '-' (default: a new id)",
    )
    parser.add_argument(
        "--output", default=None, help="the publish folder: the release (model, privacy report, plots) only"
    )
    parser.add_argument(
        "--operator-output",
        default=None,
        help="the operator folder: non-private metrics and the loss plot (default operator/<run id> beside the config)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config")
    parser.add_argument(
        "--cron", default=None, help='cron string, e.g. "0 2 * * *" (default: schedule.cron of the config)'
    )
    parser.add_argument("--timezone", default="UTC")
    parser.add_argument("--name", default="nightly", help="deployment name")


def demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--directory", default=".demo")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
