"""``dpstream convert CSV OUT``: a CSV file into a Parquet lake under explicit public policies (missing
values, categories, bounds; the bounds of columns without a public range estimated with DP from a sample
left out of the lake), and a ready pipeline config beside it."""

from __future__ import annotations

import argparse
import os

import pyarrow.parquet as pq
from rich.console import Console

from dpstream.flows.cli.support import EXIT_OK, parse_pairs
from dpstream.flows.cli.terminal import result_console
from dpstream.pipelines.conversion.config import check_config_location, default_columns, write_pipeline_toml
from dpstream.pipelines.conversion.convert import (
    ConvertedLake,
    check_csv_columns,
    check_empty_location,
    convert_csv,
    read_convert_record,
)
from dpstream.pipelines.preprocessing.private_bounds import PrivateBoundsRequest
from dpstream.pipelines.preprocessing.spec import ConvertSpec
from dpstream.storage import open_url

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    console = result_console()
    if args.drop_missing_ids and args.user is None:
        raise ValueError(
            "--drop-missing-ids drops the rows without a person id: name the person column with --user"
        )
    impute, categorical, bounds = _public_policies(args)
    label_classes = tuple(name.strip() for name in (args.label_classes or "").split(",") if name.strip())
    config = None if args.no_config else (args.config or _beside(args.out, "pipeline.toml"))
    check_empty_location(args.out)  # the lake's own refusal first: it says more than the config's
    if config is not None:
        check_config_location(config)  # before anything is written
    carried = [*args.id, *([args.user] if args.user is not None and args.user not in args.id else [])]
    columns = args.columns
    if columns is None:
        columns = default_columns(args.csv, {args.label, *categorical, *carried, *args.drop})
    check_csv_columns(args.csv, [*columns, *categorical, args.label, *carried])  # before the bounds rule
    if args.user is not None and args.user in (*columns, args.label):
        raise ValueError(
            f"--user {args.user!r} is also {'the label' if args.user == args.label else 'in --columns'}: a person's id "
            "is never trained on; name it only with --user"
        )
    settings = dict(
        columns=tuple(columns),
        label_classes=label_classes,
        passthrough=tuple(carried),
        user_column=args.user,
        intercept=not args.no_intercept,
        label=args.label,
        missing=args.missing,
        impute_values=impute,
        categorical=categorical,
        unknown_category=args.unknown_category,
        bounds=bounds,
        rows_per_file=args.rows_per_file,
        scale_range=tuple(args.scale_range),
        unscaled=tuple(args.unscaled),
    )
    private = tuple(args.private_bounds)
    if not private and not args.public_bounds_only:  # the default: the columns nobody gave a range
        private = tuple(ConvertSpec(**settings).unbounded_columns())
    spec = ConvertSpec(
        **settings,
        require_bounds=True,
        private_bounds=PrivateBoundsRequest(
            private,
            label=args.label,
            epsilon=args.private_epsilon,
            delta=args.private_delta,
            user_column=args.user,
        )
        if private
        else None,
    )
    converted = convert_csv(args.csv, args.out, spec, drop_missing_ids=args.drop_missing_ids)
    paths = converted.paths
    console.print(_rows_line(converted, args))
    console.print(
        f"wrote {len(paths)} Parquet file(s) under {args.out} with features {', '.join(spec.output_columns())}"
        + (
            f"; label {args.label} coded 0..{len(label_classes) - 1} for {', '.join(label_classes)}"
            if label_classes
            else ""
        )
    )
    if config is not None:
        _write_config(console, config, args.out, paths)
    if private:
        console.print(_private_bounds_line(args.out, private))
    return EXIT_OK


def _rows_line(converted: ConvertedLake, args: argparse.Namespace) -> str:
    """Where every row of the CSV went (exact counts: printed for the operator, recorded nowhere)."""
    parts = [f"read {converted.rows_read:,} rows, wrote {converted.rows_written:,}"]
    if converted.rows_for_bounds:
        parts.append(f"{converted.rows_for_bounds:,} spent on the private bounds (left out of the lake)")
    if converted.rows_dropped:
        policies = [f"--missing {args.missing}", f"--unknown-category {args.unknown_category}"]
        parts.append(f"{converted.rows_dropped:,} dropped by {' / '.join(policies)}")
    if converted.rows_without_id:
        parts.append(f"{converted.rows_without_id:,} without a {args.user!r} id (--drop-missing-ids)")
    return "; ".join(parts) + " (exact counts, shown here only: not in the lake, its record or a model)"


def _public_policies(
    args: argparse.Namespace,
) -> tuple[dict[str, float | str], dict[str, tuple[str, ...]], dict[str, tuple[float, float]]]:
    """The public imputation constants, category lists and ranges of ``--impute``, ``--categorical`` and
    ``--bounds``; ``ValueError`` for one that does not read as COLUMN=VALUE, COLUMN=A,B,C or COLUMN=LOW,HIGH."""
    categorical = {
        column: tuple(v for v in values.split(",") if v)
        for column, values in parse_pairs(args.categorical, "--categorical").items()
    }
    impute = {  # a category column's constant stays text: one of its categories
        column: value if column in categorical else _number_or_text(value)
        for column, value in parse_pairs(args.impute, "--impute").items()
    }
    bounds = {}
    for column, text in parse_pairs(args.bounds, "--bounds").items():
        parts = text.split(",")
        if len(parts) != 2:
            raise ValueError(f"--bounds must look like COLUMN=LOW,HIGH, got {column}={text!r}")
        bounds[column] = (float(parts[0]), float(parts[1]))
    return impute, categorical, bounds


def _number_or_text(value: str) -> float | str:
    """A number column's constant as a number; text is kept for the spec to refuse, naming the column."""
    try:
        return float(value)
    except ValueError:
        return value


def _write_config(console: Console, config: str, out: str, paths: list[str]) -> None:
    """Write the ready pipeline config of the lake at ``out`` (its ``paths``) to ``config``."""
    fs, _ = open_url(out)
    rows = 0
    for path in paths:
        with fs.open(path, "rb") as handle:
            rows += pq.ParquetFile(handle).metadata.num_rows
    write_pipeline_toml(config, _relative(out, config), read_convert_record(out), rows)
    console.print(
        f"wrote {config}: `dpstream validate {config}`, then `dpstream train {config} --run-id NAME`"
    )


def _private_bounds_line(out: str, private: tuple[str, ...]) -> str:
    """What the private bounds of the ``private`` columns released, and their guarantee (the lake's record)."""
    record = read_convert_record(out)
    released = ", ".join(f"{c}=[{record['bounds'][c][0]:.6g}, {record['bounds'][c][1]:.6g}]" for c in private)
    return (
        f"private bounds {released}: {record['private_bounds']['guarantee']}. Public ranges, where the data's "
        "documentation gives them (--bounds COLUMN=LOW,HIGH), keep every row in the lake"
    )


def _beside(url: str, name: str) -> str:
    """``name`` in the folder that holds ``url``."""
    parent = url.rstrip("/").rsplit("/", 1)[0] if "/" in url.rstrip("/") else "."
    return f"{parent}/{name}"


def _relative(url: str, config: str) -> str:
    """``url`` as the config at ``config`` names it: relative to the config's folder for local paths
    (a config's relative locations are anchored there), else as given."""
    if "://" in url or "://" in config:
        return url
    return os.path.relpath(os.path.abspath(url), os.path.dirname(os.path.abspath(config)))
