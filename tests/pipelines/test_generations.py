"""Shuffle generations are immutable and verified: a changed, missing, foreign or repeated part
is refused before anything is charged; two shuffles at once commit one generation; a source file that
changed after validation is never shuffled; the same records in two source files are refused."""

import json
import multiprocessing
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.coordinator import InMemoryExecutor
from dpstream.models import LinearRegressionModel
from dpstream.pipelines import (
    LakeError,
    lake_blocks,
    read_manifest,
    shuffle_once,
    validate_lake,
    verify_parts,
)
from dpstream.pipelines.shuffle.generations import COMMITS
from dpstream.privacy import Ledger, LifetimeBudget

from .conftest import DIM, feature_spec, flip_data_byte, local_put, make_table, write_lake


def _commit_record(out, manifest):
    return os.path.join(out, COMMITS, f"{manifest.number:06d}.json")


def _edit_record(out, manifest, edit):
    path = _commit_record(out, manifest)
    document = json.loads(open(path).read())
    edit(document)
    with open(path, "w") as handle:
        json.dump(document, handle)


def _copy_over(source, target):
    shutil.copyfile(source, target)


def _tamper(kind, out, manifest, other):
    paths = manifest.paths()
    if kind == "a part copied over another":
        _copy_over(paths[1], paths[0])
    elif kind == "a part of another shuffle":
        _copy_over(other.paths()[0], paths[0])
    elif kind == "a truncated part":
        with open(paths[0], "r+b") as handle:
            handle.truncate(os.path.getsize(paths[0]) // 2)
    elif kind == "a missing part":
        os.remove(paths[0])
    elif kind == "a part listed twice":
        _edit_record(out, manifest, lambda d: d["parts"].__setitem__(1, dict(d["parts"][0])))
    elif kind == "inflated row counts":

        def inflate(document):
            document["parts"][0]["rows"] += 1000
            document["parts"][0]["row_groups"][0] += 1000
            document["source_rows"] += 1000

        _edit_record(out, manifest, inflate)
    elif kind == "a path in a part name":
        _edit_record(out, manifest, lambda d: d["parts"][0].__setitem__("name", "../../raw/day=00.parquet"))


TAMPERING = [
    "a part copied over another",
    "a part of another shuffle",
    "a truncated part",
    "a missing part",
    "a part listed twice",
    "inflated row counts",
    "a path in a part name",
]


@pytest.mark.parametrize("kind", TAMPERING)
def test_a_changed_shuffled_lake_is_refused_before_anything_is_charged(lake, tmp_path, kind):
    from dpstream.pipelines import plan_on_lake, train_on_lake

    from .test_executor import ALGORITHMS, KEY

    out = str(tmp_path / "shuffled")
    manifest = shuffle_once(lake, out, rows_per_file=5000)
    other = shuffle_once(lake, str(tmp_path / "another"), rows_per_file=5000)
    _tamper(kind, out, manifest, other)
    ledger = Ledger(str(tmp_path / "ledger")).lake(
        manifest.fingerprint, LifetimeBudget(4.0, 1e-6), files=manifest.source_files
    )
    with pytest.raises(LakeError) as refused:
        current = read_manifest(out)  # an edited manifest is refused as it is read
        train_on_lake(
            current,
            plan_on_lake(current, ALGORITHMS[2], LinearRegressionModel()),
            None,
            KEY,
            mode="streaming",
            run_id="r1",
            ledger=ledger,
        )
    message = str(refused.value)
    assert "part-00000.parquet" in message or "_generations/000001.json" in message, message
    assert "--reshuffle" in message
    assert ledger.entries() == [] and ledger.aborted() == []


def test_verification_names_the_part_and_a_flipped_data_byte_fails_its_page_checksum(lake, tmp_path):
    out = str(tmp_path / "shuffled")
    manifest = shuffle_once(lake, out, rows_per_file=5000)
    verify_parts(manifest)  # untouched: passes
    path = manifest.paths()[2]
    flip_data_byte(path)  # size and footer unchanged
    verify_parts(manifest)  # the footer still matches ...
    with pytest.raises(LakeError, match="part-00002.parquet: a page of row group 0 fails its checksum"):
        list(lake_blocks(manifest))  # ... but no row of that page is ever used


@pytest.mark.parametrize("storage", ["local", "s3"])
def test_a_part_replaced_while_a_run_reads_it_stops_the_run(lake, tmp_path, storage, request):
    from dpstream.pipelines.lake.blocks import read_block

    options = {}
    if storage == "local":
        manifest = shuffle_once(lake, str(tmp_path / "s"), rows_per_file=3500)
    else:
        import s3fs

        from .test_executor import s3_put

        url, options = request.getfixturevalue("s3_bucket")
        write_lake(s3_put(s3fs.S3FileSystem(**options)), f"{url[5:]}/raw", files=2, rows=4000)
        manifest = shuffle_once(feature_spec(f"{url}/raw", **options), f"{url}/s", rows_per_file=3000)
    spec, checks = manifest.spec(options), manifest.part_checks(options)
    first, second = manifest.paths(options)[:2]
    fs, _ = spec.filesystem()
    read_block(fs, first, spec, 0, manifest.row_order, checks[first])  # footer verified and cached
    fs.pipe_file(first, fs.cat_file(second))  # same name, another part's bytes
    fs.invalidate_cache()
    with pytest.raises(LakeError, match="was changed while a run read it"):
        read_block(fs, first, spec, 1, manifest.row_order, checks[first])


def _shuffle_in_process(spec, out, results):
    try:
        manifest = shuffle_once(spec, out, rows_per_file=2000)
        results.put(("ok", manifest.generation, manifest.num_rows))
    except Exception as error:  # noqa: BLE001 - reported to the test
        results.put(("error", type(error).__name__, str(error)))


@pytest.mark.parametrize("storage", ["local", "s3"])
def test_concurrent_shuffles_commit_one_generation_and_lose_no_row(tmp_path, storage, request):
    if storage == "local":
        raw, out, options = str(tmp_path / "raw"), str(tmp_path / "shuffled"), {}
        write_lake(local_put, raw, files=6, rows=1000)
    else:
        import s3fs

        from .test_executor import s3_put

        url, options = request.getfixturevalue("s3_bucket")
        write_lake(s3_put(s3fs.S3FileSystem(**options)), f"{url[5:]}/raw", files=6, rows=1000)
        raw, out = f"{url}/raw", f"{url}/shuffled"
    spec = feature_spec(raw, **options)
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    racers = [context.Process(target=_shuffle_in_process, args=(spec, out, results)) for _ in range(3)]
    for racer in racers:
        racer.start()
    outcomes = [results.get(timeout=240) for _ in racers]
    for racer in racers:
        racer.join(timeout=60)
    assert all(status == "ok" for status, *_ in outcomes), outcomes
    assert (
        len({generation for _, generation, _ in outcomes}) == 1
    )  # every racer got the one committed generation
    assert {rows for *_, rows in outcomes} == {6000}
    manifest = read_manifest(out, options)
    assert manifest.number == 1 and manifest.generation == outcomes[0][1]
    verify_parts(manifest, options)
    from dpstream.pipelines.shuffle.generations import GenerationStore

    assert GenerationStore(out, options).uncommitted() == []  # the losers removed their own generations
    values = np.sort(np.concatenate([y for _, y in lake_blocks(manifest, options)]))
    expected = np.sort(np.concatenate([make_table(1000, i).column("y").to_numpy() for i in range(6)]))
    np.testing.assert_array_equal(values, expected)


def test_a_source_file_changed_after_validation_is_never_shuffled(lake, tmp_path):
    summary = validate_lake(lake)
    victim = os.path.join(lake.url, "day=01.parquet")
    table = make_table(5000, 1, start_id=5000)
    y = table.column("y").to_numpy().copy()
    y[:20] = np.nan
    local_put(victim, table.set_column(table.schema.get_field_index("y"), "y", pa.array(y)))
    out = str(tmp_path / "shuffled")
    with pytest.raises(LakeError, match="day=01.parquet changed after the lake was validated"):
        shuffle_once(lake, out, summary=summary)
    assert read_manifest(out) is None
    assert [name for name in os.listdir(out) if name.startswith("_g-")] == []  # its own generation removed


@pytest.mark.parametrize("how", ["copy", "symlink"])
def test_two_source_files_with_the_same_records_are_refused(lake, how):
    original = os.path.join(lake.url, "day=02.parquet")
    duplicate = os.path.join(lake.url, "day=99.parquet")
    if how == "copy":
        shutil.copyfile(original, duplicate)
    else:
        os.symlink(original, duplicate)
    with pytest.raises(
        LakeError, match=r"day=02.parquet and day=99.parquet have the same content .* Remove the copy"
    ):
        validate_lake(lake)


def test_a_shuffled_lake_is_refused_as_a_source_and_underscore_folders_are_skipped(lake, tmp_path):
    out = str(tmp_path / "shuffled")
    shuffle_once(lake, out, rows_per_file=5000)
    with pytest.raises(LakeError, match="is a shuffled lake written by dpstream"):
        validate_lake(feature_spec(out))
    # Bookkeeping folders inside a lake (an unfinished write, a Delta log) are never read as data.
    os.makedirs(os.path.join(lake.url, "_tmp-1234"))
    pq.write_table(make_table(10, 7), os.path.join(lake.url, "_tmp-1234", "part-00000.parquet"))
    assert validate_lake(lake).num_rows == 20_000


def test_in_memory_training_reads_the_pinned_generation_after_a_reshuffle(lake, tmp_path):
    """In process: a reshuffle between two steps of a run does not change a single bit of its model (the
    run reads the generation it pinned)."""
    from dpstream.coordinator import run

    from .test_executor import ALGORITHMS, KEY

    out = str(tmp_path / "s")
    manifest = shuffle_once(lake, out, rows_per_file=3500)
    algorithm = ALGORITHMS[2]  # DP-λCGD, many steps

    def train(on_step=None):
        return run(
            algorithm,
            InMemoryExecutor(LinearRegressionModel(), lake_blocks(manifest)),
            num_rows=manifest.num_rows,
            num_params=DIM,
            initial_params=np.zeros(DIM),
            key=KEY,
            on_step=on_step,
        ).params

    reference = train()
    reshuffled = []

    def reshuffle_once(step, state):
        if step == 2 and not reshuffled:
            reshuffled.append(shuffle_once(lake, out, rows_per_file=3500, reshuffle=True))

    assert train(reshuffle_once).tobytes() == reference.tobytes()
    assert reshuffled and read_manifest(out).generation == reshuffled[0].generation != manifest.generation


def test_a_shuffled_lake_nested_inside_a_source_lake_is_refused(lake, tmp_path):
    """An earlier dpstream's single-folder shuffle, or a generation store, inside the source folder: its
    parts hold the same records as the source files beside them."""
    nested = os.path.join(lake.url, "old-shuffle")
    os.makedirs(nested)
    shutil.copyfile(os.path.join(lake.url, "day=00.parquet"), os.path.join(nested, "part-00000.parquet"))
    with open(os.path.join(nested, "_manifest.json"), "w") as handle:
        handle.write("{}")
    with pytest.raises(LakeError, match="holds a shuffled lake written by dpstream in old-shuffle/"):
        validate_lake(lake)


def test_a_commit_whose_answer_was_lost_is_recognised_as_ours(lake, tmp_path, monkeypatch):
    """A conditional PUT that succeeded, whose answer was lost and whose retry got HTTP 412, reads as
    'exists': the shuffle finds its own generation there and returns it."""
    from dpstream.pipelines.shuffle.generations import GenerationStore

    written = GenerationStore.try_commit

    def succeeded_but_lost(self, manifest):
        written(self, manifest)
        return False

    monkeypatch.setattr(GenerationStore, "try_commit", succeeded_but_lost)
    manifest = shuffle_once(lake, str(tmp_path / "s"), rows_per_file=5000)
    assert read_manifest(str(tmp_path / "s")) == manifest and manifest.number == 1
    verify_parts(manifest)  # its folder was kept, not discarded as a loser's
