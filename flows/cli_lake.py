"""The ``dpstream`` commands that read or write lakes and published runs without the train flow:
``convert`` (CSV → Parquet, optional DP bounds), ``predict`` (batch scoring on Dask) and ``report``.
Each imports what it needs when it runs (CLI start-up, BENCHMARKS.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flows.cli_support import EXIT_OK, log_to_file, parse_pairs

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["convert_command", "predict_command", "report_command"]


def convert_command(args, console: Console) -> int:
    from pipelines.convert import ConvertSpec, check_csv_columns, csv_to_parquet, read_convert_record
    from pipelines.convert_bounds import PrivateBoundsRequest

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
    check_csv_columns(args.csv, [*args.columns, *categorical, args.label])  # before the bounds rule
    spec = ConvertSpec(
        columns=tuple(args.columns),
        label=args.label,
        missing=args.missing,
        impute_values=impute,
        categorical=categorical,
        unknown_category=args.unknown_category,
        bounds=bounds,
        rows_per_file=args.rows_per_file,
        scale_range=tuple(args.scale_range),
        unscaled=tuple(args.unscaled),
        require_bounds=True,
        private_bounds=PrivateBoundsRequest(
            tuple(args.private_bounds), args.private_epsilon, args.private_delta
        )
        if args.private_bounds
        else None,
    )
    paths = csv_to_parquet(args.csv, args.out, spec)
    console.print(
        f"wrote {len(paths)} Parquet file(s) under {args.out} with features {', '.join(spec.output_columns())}"
    )
    if spec.private_bounds:
        record = read_convert_record(args.out)
        released = ", ".join(
            f"{c}=[{record['bounds'][c][0]:g}, {record['bounds'][c][1]:g}]" for c in args.private_bounds
        )
        console.print(f"private bounds {released}: {record['private_bounds']['guarantee']}")
    return EXIT_OK


def predict_command(args, console: Console) -> int:
    from dpstream.export import read_model
    from pipelines import connect
    from pipelines.predict import predict_lake

    model = read_model(args.model)
    log_to_file(
        args, "predict", model.run_id or "model"
    )  # a worker's traceback goes there, not to the terminal
    client = connect(args.scheduler, n_workers=args.workers, memory_limit=args.memory_limit)
    try:
        summary = predict_lake(model, args.lake, args.out, client=client, keep=tuple(args.keep))
    finally:
        client.close()
    columns = "prediction, probability" if model.is_classifier else f"prediction ({model.label})"
    console.print(
        f"scored {summary.rows:,} rows into {len(summary.files)} Parquet file(s) under {args.out}: {columns}"
    )
    return EXIT_OK


def report_command(args, console: Console) -> int:
    import json

    from dpstream.algorithms import PrivacyReport
    from dpstream.storage import open_url

    fs, root = open_url(args.run)  # a folder on disk or a URL such as s3://bucket/runs/<run id>
    path = f"{root}/model.json"
    if not fs.exists(path):
        raise FileNotFoundError(
            f"{args.run} holds no published run (no model.json); pass the run's output folder"
        )
    with fs.open(path, "rb") as handle:
        document = json.loads(handle.read().decode())
    privacy = document["privacy"]
    privacy["clip_norms"] = tuple(privacy["clip_norms"])
    privacy["notes"] = tuple(privacy["notes"])
    console.print(f"run {document['run_id']}")
    if "model" in document:  # dpstream-model/1 and later
        features = document["features"]
        shown = ", ".join(features) if isinstance(features, list) else f"vector column {features!r}"
        console.print(
            f"{document['model']['kind']} model trained with {document['algorithm']}: {shown} → {document['label']}"
        )
        console.print(_preprocessing_line(document.get("preprocessing"), document["label"]))
    console.print(PrivacyReport(**privacy).to_markdown())
    for name, value in document.get("metrics", {}).items():
        console.print(f"{name}: {value:.6g}")
    return EXIT_OK


def _preprocessing_line(record: dict | None, label: str) -> str:
    if not record:
        return "preprocessing: not recorded (the lake was not written by `dpstream convert`); features are read as stored"
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
