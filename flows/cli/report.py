"""``dpstream report RUN_DIR``: the privacy report a run published (its model.json, checked whole), and
with ``--operator`` its non-private held-out metric beside the baseline."""

from __future__ import annotations

import argparse

from dpstream.algorithms import PrivacyReport
from dpstream.export import read_model
from dpstream.flows.assembly.locations import check_release_folder
from dpstream.flows.cli.support import EXIT_OK
from dpstream.flows.cli.terminal import result_console
from dpstream.models.kinds.base import summarise
from dpstream.storage import open_url, read_json

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    console = result_console()
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
