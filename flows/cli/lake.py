"""The ``dpstream`` commands that read or write lakes and published runs without the train flow:
``convert`` (CSV → Parquet, optional DP bounds), ``predict`` (batch scoring on Dask) and ``report``.
Each imports what it needs when it runs (CLI start-up, BENCHMARKS.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpstream.flows.cli.interrupt import exit_code, report_interrupted, signal_of
from dpstream.flows.cli.support import EXIT_OK, log_to_file, parse_pairs

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["convert_command", "predict_command", "report_command", "add_lake_parsers"]


def add_lake_parsers(commands) -> None:
    """The ``convert``, ``predict`` and ``report`` subcommands."""
    convert = commands.add_parser("convert", help="convert a CSV file into a Parquet lake")
    convert.add_argument("csv")
    convert.add_argument("out")
    convert.add_argument(
        "--columns",
        nargs="+",
        default=None,
        help="numeric feature columns to keep (default: every numeric column not named elsewhere or in --drop)",
    )
    convert.add_argument("--label", required=True)
    convert.add_argument(
        "--label-classes",
        default=None,
        metavar="A,B,C",
        help="the label's public class list: each label is written as its position (other values are refused, "
        "or dropped with --unknown-category drop), and the config's model is logistic over these classes",
    )
    convert.add_argument(
        "--id",
        nargs="*",
        default=[],
        metavar="COLUMN",
        help="columns carried into the lake untouched (never features)",
    )
    convert.add_argument(
        "--user",
        default=None,
        metavar="COLUMN",
        help="the column naming a person (a customer, patient, device): carried into the lake like --id, the "
        "private bounds sample every 10th person (all their rows, each person weighing one row), and the "
        "written config protects people ([privacy] unit = 'user')",
    )
    convert.add_argument(
        "--drop", nargs="*", default=[], metavar="COLUMN", help="columns left out of the default --columns"
    )
    convert.add_argument(
        "--no-intercept",
        action="store_true",
        help="no constant feature 'intercept' = 1 (written by default so a model has an intercept)",
    )
    convert.add_argument(
        "--config",
        default=None,
        metavar="PATH",
        help="where to write the ready pipeline config (default: pipeline.toml beside the lake; never overwritten)",
    )
    convert.add_argument("--no-config", action="store_true", help="write no pipeline config")
    convert.add_argument("--missing", choices=["drop", "impute"], default="drop")
    convert.add_argument(
        "--impute", nargs="*", default=[], metavar="COLUMN=VALUE", help="public imputation constants"
    )
    convert.add_argument(
        "--categorical", nargs="*", default=[], metavar="COLUMN=A,B,C", help="public category lists (one-hot)"
    )
    convert.add_argument(
        "--bounds",
        nargs="*",
        default=[],
        metavar="COLUMN=LOW,HIGH",
        help="public ranges: clip to [LOW, HIGH] and map onto --scale-range",
    )
    convert.add_argument(
        "--unscaled",
        nargs="*",
        default=[],
        metavar="COLUMN",
        help="numeric columns already on the public scale, kept as they are (every other numeric "
        "column, the label included, gets --bounds or private bounds)",
    )
    convert.add_argument(
        "--scale-range",
        nargs=2,
        type=float,
        default=[-1.0, 1.0],
        metavar=("LOW", "HIGH"),
        help="the range bounded columns are mapped onto (default -1 1, the public scale the "
        "algorithms' row bounds and steps assume)",
    )
    convert.add_argument(
        "--private-bounds",
        nargs="*",
        default=[],
        metavar="COLUMN",
        help="the columns whose bounds are estimated with DP from every 10th row, which is then left out of the "
        "lake (the lake's ledger is not charged; model.json states the guarantee). Default: every numeric column "
        "with neither --bounds nor --unscaled",
    )
    convert.add_argument(
        "--public-bounds-only",
        action="store_true",
        help="refuse a numeric column without --bounds or --unscaled instead of estimating its bounds privately "
        "(every row then goes into the lake)",
    )
    convert.add_argument(
        "--private-epsilon", type=float, default=1.0, help="ε of the private bounds (default 1)"
    )
    convert.add_argument(
        "--private-delta", type=float, default=1e-6, help="δ of the private bounds (default 1e-6)"
    )
    convert.add_argument("--unknown-category", choices=["error", "drop"], default="error")
    convert.add_argument("--rows-per-file", type=int, default=250_000)
    convert.set_defaults(handler=convert_command)
    predict = commands.add_parser(
        "predict",
        help="score a lake (Parquet folder, Delta or Iceberg table) with a published model on a Dask cluster",
    )
    predict.add_argument("model", help="model.json of a run (or the run's folder)")
    predict.add_argument(
        "lake",
        help="the lake to score: a Parquet folder, or a Delta or Iceberg table's location (its live rows); "
        "features as in the training lake, any column order",
    )
    predict.add_argument("out", help="a new location for the predictions (one file per lake file)")
    predict.add_argument(
        "--format",
        choices=["parquet", "delta"],
        default="parquet",
        help="write the predictions as Parquet files (default) or as a new Delta table (one commit)",
    )
    predict.add_argument(
        "--version",
        type=int,
        default=None,
        help="score this version of a Delta table (or this snapshot id of an Iceberg table); default the latest",
    )
    predict.add_argument(
        "--keep",
        nargs="*",
        default=[],
        metavar="COLUMN",
        help="lake columns to copy beside the predictions (an id)",
    )
    predict.add_argument(
        "--scheduler", default=None, help="a Dask scheduler address (default: a LocalCluster)"
    )
    predict.add_argument("--workers", type=int, default=2, help="LocalCluster workers (default 2)")
    predict.add_argument(
        "--memory-limit", default="2GiB", help="LocalCluster memory per worker (default 2GiB)"
    )
    predict.set_defaults(handler=predict_command)
    report = commands.add_parser(
        "report", help="print the privacy report of a published run (its model.json, checked whole)"
    )
    report.add_argument("run", help="the run's output folder (holds model.json)")
    report.add_argument(
        "--operator",
        default=None,
        metavar="DIR",
        help="the run's operator folder (operator/<run id> beside the config by default): also print its "
        "non-private held-out metric beside the baseline",
    )
    report.set_defaults(handler=report_command)


def convert_command(args, console: Console) -> int:
    from dpstream.pipelines.preprocessing.bounds import PrivateBoundsRequest
    from dpstream.pipelines.preprocessing.convert import (
        ConvertSpec,
        check_csv_columns,
        check_empty_location,
        csv_to_parquet,
        read_convert_record,
    )

    impute = {column: float(value) for column, value in parse_pairs(args.impute, "--impute").items()}
    categorical = {
        column: tuple(v for v in values.split(",") if v)
        for column, values in parse_pairs(args.categorical, "--categorical").items()
    }
    bounds = {}
    for column, text in parse_pairs(args.bounds, "--bounds").items():
        parts = text.split(",")
        if len(parts) != 2:
            raise ValueError(f"--bounds must look like COLUMN=LOW,HIGH, got {column}={text!r}")
        bounds[column] = (float(parts[0]), float(parts[1]))
    from dpstream.pipelines.preprocessing.config import (
        check_config_location,
        default_columns,
        write_pipeline_toml,
    )

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
    paths = csv_to_parquet(args.csv, args.out, spec)
    console.print(
        f"wrote {len(paths)} Parquet file(s) under {args.out} with features {', '.join(spec.output_columns())}"
        + (
            f"; label {args.label} coded 0..{len(label_classes) - 1} for {', '.join(label_classes)}"
            if label_classes
            else ""
        )
    )
    if config is not None:
        import pyarrow.parquet as pq

        from dpstream.storage import open_url

        fs, _ = open_url(args.out)
        rows = 0
        for path in paths:
            with fs.open(path, "rb") as handle:
                rows += pq.ParquetFile(handle).metadata.num_rows
        write_pipeline_toml(config, _relative(args.out, config), read_convert_record(args.out), rows)
        console.print(
            f"wrote {config}: `dpstream validate {config}`, then `dpstream train {config} --run-id NAME`"
        )
    if private:
        record = read_convert_record(args.out)
        released = ", ".join(
            f"{c}=[{record['bounds'][c][0]:.6g}, {record['bounds'][c][1]:.6g}]" for c in private
        )
        console.print(
            f"private bounds {released}: {record['private_bounds']['guarantee']}. Public ranges, where the data's "
            "documentation gives them (--bounds COLUMN=LOW,HIGH), keep every row in the lake"
        )
    return EXIT_OK


def _beside(url: str, name: str) -> str:
    """``name`` in the folder that holds ``url``."""
    parent = url.rstrip("/").rsplit("/", 1)[0] if "/" in url.rstrip("/") else "."
    return f"{parent}/{name}"


def _relative(url: str, config: str) -> str:
    """``url`` as the config at ``config`` names it: relative to the config's folder for local paths
    (a config's relative locations are anchored there), else as given."""
    import os

    if "://" in url or "://" in config:
        return url
    return os.path.relpath(os.path.abspath(url), os.path.dirname(os.path.abspath(config)))


def predict_command(args, console: Console) -> int:
    from dpstream.export import read_model
    from dpstream.locations import Protected
    from dpstream.pipelines import connect
    from dpstream.pipelines.execution.predict import check_predictions_location, predict_lake
    from dpstream.pipelines.lake.files import SourceSpec

    model = read_model(args.model)  # checked whole: its run id names the log file
    check_predictions_location(args.out, args.lake)  # before a log, a cluster or a file is written
    args.protected = (
        Protected(args.lake, "the lake being scored"),
        Protected(args.out, "the predictions' folder"),
    )
    log_to_file(args, "predict", model.run_id)  # a worker's traceback goes there, not to the terminal
    try:
        client = connect(args.scheduler, n_workers=args.workers, memory_limit=args.memory_limit)
        try:
            summary = predict_lake(
                model,
                args.lake,
                args.out,
                client=client,
                keep=tuple(args.keep),
                source=SourceSpec(version=args.version),
                out_format=args.format,
            )
        finally:
            client.close()
    except KeyboardInterrupt as interrupted:  # Ctrl-C, or SIGTERM / SIGHUP under the console script
        # Unwound, not exited at once as train is: predict_lake's own clean-up removes its unfinished parts.
        signum = signal_of(interrupted)
        report_interrupted(
            signum,
            f"scoring stopped and nothing was written to {args.out} (log: {args.log_file}); run the same "
            "command again",
        )
        return exit_code(signum)
    columns = ", ".join(model.output_columns()) + ("" if model.is_classifier else f" ({model.label})")
    written = "a new Delta table of" if args.format == "delta" else ""
    source = f" of {summary.source.describe()}" if summary.source.version is not None else ""
    console.print(
        f"scored {summary.rows:,} rows{source} into {written} {len(summary.files)} Parquet file(s) under "
        f"{args.out}: {columns}".replace("  ", " ")
    )
    return EXIT_OK


def report_command(args, console: Console) -> int:
    from dpstream.algorithms import PrivacyReport
    from dpstream.export import read_model
    from dpstream.flows.assembly.locations import check_release_folder
    from dpstream.storage import open_url

    fs, root = open_url(args.run)  # a folder on disk or a URL such as s3://bucket/runs/<run id>
    if not fs.exists(f"{root}/model.json"):
        raise FileNotFoundError(
            f"{args.run} holds no published run (no model.json); pass the run's output folder"
        )
    check_release_folder(args.run)
    model = read_model(args.run)  # checked whole: a damaged or edited model.json is refused with one line
    privacy = {
        **model.privacy,
        "clip_norms": tuple(model.privacy["clip_norms"]),
        "notes": tuple(model.privacy["notes"]),
    }
    console.print(f"run {model.run_id}")
    shown = ", ".join(model.features)
    console.print(f"{model.kind} model trained with {model.algorithm}: {shown} → {model.label}")
    if model.classes is not None:
        console.print(
            f"classes of {model.label} (public, in the order of its codes): {', '.join(model.classes)}"
        )
    console.print(_preprocessing_line(model.preprocessing, model.label))
    console.print(PrivacyReport(**privacy).to_markdown())
    if args.operator is None:
        console.print(
            "The held-out evaluation is non-private and not part of the release: `dpstream train` printed it, and "
            "wrote it to the run's operator folder (operator/<run id>/metrics.json by default; pass it as --operator)"
        )
        return EXIT_OK
    from dpstream.models.kinds import summarise
    from dpstream.storage import read_json

    fs, root = open_url(args.operator)
    path = f"{root.rstrip('/')}/metrics.json"
    if not fs.exists(path):
        raise FileNotFoundError(f"{args.operator} holds no metrics.json; pass the run's operator folder")
    stored = read_json(fs, path)
    if stored.get("run_id") != model.run_id:
        raise ValueError(
            f"{path} belongs to run {stored.get('run_id')!r}, not {model.run_id!r}; pass this run's operator folder"
        )
    console.print(summarise(stored["metrics"]), soft_wrap=True)
    return EXIT_OK


def _preprocessing_line(record: dict | None, label: str) -> str:
    if not record:
        return "preprocessing: not recorded (the lake was not written by `dpstream convert`); features are read as stored"
    if record.get("on_read"):
        return (
            f"preprocessing ([preprocess], applied as rows are read): {len(record['bounds'])} column(s) clipped to public "
            f"bounds and mapped onto [-1, 1], {len(record['categorical'])} one-hot, {len(record['impute_values'])} "
            "imputed; `dpstream predict` prepares a table's raw columns alike; all in model.json"
        )
    low, high = record["scale_range"]
    label_bounds = record["bounds"].get(label)
    label_part = (
        f"; predictions map back to {label} by [{low:g}, {high:g}] → [{label_bounds[0]:g}, {label_bounds[1]:g}]"
        if label_bounds
        else ""
    )
    kind = "their" if record.get("private_bounds") else "public"
    return (
        f"preprocessing (dpstream convert of {record.get('source', 'a CSV')}): {len(record['bounds'])} column(s) clipped "
        f"to {kind} bounds and mapped onto [{low:g}, {high:g}], {len(record['categorical'])} one-hot, "
        f"{len(record['impute_values'])} imputed{label_part}{_private_part(record)}; all in model.json"
    )


def _private_part(record: dict) -> str:
    private = record.get("private_bounds")
    if not private:
        return ""
    return f"; the bounds of {', '.join(private['columns'])} are DP estimates, {private['guarantee']}"
