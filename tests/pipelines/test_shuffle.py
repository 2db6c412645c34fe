"""Shuffle once: a balanced random permutation committed as an immutable generation, idempotent, source
untouched (the generations' own rules: tests/pipelines/test_generations.py)."""

import hashlib
import os
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from dpstream.pipelines import LakeError, prune_shuffles, read_manifest, shuffle_once
from dpstream.pipelines.shuffle.generations import COMMITS, STALE_SECONDS

from .conftest import feature_spec, local_put, write_lake


def checksums(root):
    return {
        name: hashlib.sha256(open(os.path.join(root, name), "rb").read()).hexdigest()
        for name in sorted(os.listdir(root))
    }


def output_tables(manifest):
    return [pq.read_table(path) for path in manifest.paths()]


def test_permutation_balanced_and_source_untouched(lake, tmp_path):
    source = checksums(lake.url)
    reported = []
    manifest = shuffle_once(
        lake,
        str(tmp_path / "shuffled"),
        rows_per_file=3000,
        on_progress=lambda phase, rows: reported.append((phase, rows)),
    )
    assert reported == [("scatter", 5000)] * 4 + [("gather", rows) for _, rows in manifest.files]
    assert checksums(lake.url) == source
    sizes = [rows for _, rows in manifest.files]
    assert len(sizes) == 7 and sum(sizes) == 20_000 and max(sizes) - min(sizes) <= 1
    tables = output_tables(manifest)
    assert [t.num_rows for t in tables] == sizes
    assert set(tables[0].column_names) == set(lake.columns)  # only the columns the spec uses
    # Same multiset of rows: feature and label values per source row id are preserved.
    originals = {}
    for name in os.listdir(lake.url):
        t = pq.read_table(os.path.join(lake.url, name))
        for row_id, value in zip(t.column("row_id").to_numpy(), t.column("y").to_numpy(), strict=True):
            originals[row_id] = value
    shuffled_y = np.sort(np.concatenate([t.column("y").to_numpy() for t in tables]))
    np.testing.assert_array_equal(shuffled_y, np.sort(np.array(list(originals.values()))))
    # Mixed: the first output file draws rows from every input file, spread across its length.
    source_days = pq.read_table(lake.url, columns=["y", "day"])
    lookup = dict(zip(source_days.column("y").to_numpy(), source_days.column("day").to_numpy(), strict=True))
    first_days = [lookup[v] for v in tables[0].column("y").to_numpy()]
    assert set(first_days) == {0, 1, 2, 3}
    assert abs(np.mean(first_days) - 1.5) < 0.1
    assert manifest.num_features == 6 and manifest.source_url == lake.url


def test_fresh_randomness_each_shuffle(lake, tmp_path):
    a = output_tables(shuffle_once(lake, str(tmp_path / "a"), rows_per_file=5000))[0].column("y").to_numpy()
    b = output_tables(shuffle_once(lake, str(tmp_path / "b"), rows_per_file=5000))[0].column("y").to_numpy()
    assert not np.array_equal(a, b)


def tree_stamps(root):
    return {
        os.path.relpath(os.path.join(folder, name), root): os.stat(os.path.join(folder, name)).st_mtime_ns
        for folder, _, names in os.walk(root)
        for name in names
    }


def test_idempotent_with_complete_manifest(lake, tmp_path):
    out = str(tmp_path / "out")
    first = shuffle_once(lake, out, rows_per_file=5000)
    stamps = tree_stamps(out)
    assert shuffle_once(lake, out, rows_per_file=5000) == first
    assert stamps == tree_stamps(out)
    assert read_manifest(out) == first
    assert sorted(os.listdir(out)) == [first.generation, COMMITS]
    assert sorted(os.listdir(os.path.join(out, first.generation))) == ["_started.json"] + [
        f"part-{j:05d}.parquet" for j in range(4)
    ]


def test_automatic_layout_always_leaves_a_file_to_hold_out(lake, tmp_path):
    manifest = shuffle_once(lake, str(tmp_path / "auto"))  # 20,000 rows, no rows_per_file: 5 files of 4,000
    assert [rows for _, rows in manifest.files] == [4000] * 5
    training, held_out = manifest.split_last_file()
    assert (training.num_rows, held_out.num_rows) == (16_000, 4_000)


def test_a_shuffle_with_another_layout_is_never_reused_silently(lake, tmp_path):
    out = str(tmp_path / "out")
    first = shuffle_once(lake, out, rows_per_file=5000)  # 20,000 rows: 4 files
    assert shuffle_once(lake, out, rows_per_file=6000) == first  # also 4 files: the same layout, reused
    before = tree_stamps(out)
    with pytest.raises(
        LakeError, match=r"in 4 files, but rows_per_file=2000 asks for 10.*never reused silently.*e\.g\. 5000"
    ):
        shuffle_once(lake, out, rows_per_file=2000)
    assert before == tree_stamps(out)  # nothing touched


def test_reshuffle_commits_a_new_generation_and_keeps_the_pinned_one(lake, tmp_path):
    out = str(tmp_path / "out")
    first = shuffle_once(lake, out, rows_per_file=5000)
    first_files = tree_checksums(os.path.join(out, first.generation))
    with pytest.raises(LakeError, match=r"--reshuffle"):
        shuffle_once(lake, out, rows_per_file=2000)
    second = shuffle_once(lake, out, rows_per_file=2000, reshuffle=True)
    assert len(second.files) == 10 and read_manifest(out) == second and second.number == first.number + 1
    assert sum(pq.read_table(path).num_rows for path in second.paths()) == 20_000
    # The generation a run pinned is untouched and still readable by its name.
    assert tree_checksums(os.path.join(out, first.generation)) == first_files
    assert read_manifest(out, generation=first.generation) == first
    # Same data, so the same ledger unit; another row order, so no checkpoint of the first resumes on it.
    assert second.fingerprint == first.fingerprint and second.row_order != first.row_order
    assert (
        shuffle_once(lake, out, rows_per_file=2000).row_order == second.row_order
    )  # reused: stable identity


def test_reshuffle_deletes_nothing_it_did_not_write(lake, tmp_path):
    out = tmp_path / "out"
    shuffle_once(lake, str(out), rows_per_file=5000)
    (out / "notes.txt").write_text("mine")
    before = tree_checksums(out)
    with pytest.raises(
        LakeError, match=r"holds files a shuffle did not write \(notes.txt\); nothing was deleted"
    ):
        shuffle_once(lake, str(out), rows_per_file=2000, reshuffle=True)
    assert tree_checksums(out) == before


def test_an_interrupted_shuffle_is_never_read_and_prune_removes_it_when_stale(lake, tmp_path):
    out = tmp_path / "out"
    stale = out / "_g-20260101T000000Z-0badc0de"
    (stale / "_scratch").mkdir(parents=True)
    (stale / "_scratch" / "from-00000.arrow").write_bytes(b"partial")
    (stale / "part-00009.parquet").write_bytes(b"partial")  # no commit record: never committed
    (stale / "_started.json").write_text('{"started_at": 0}')
    manifest = shuffle_once(lake, str(out), rows_per_file=5000)
    assert manifest.num_rows == 20_000 and manifest.generation != stale.name and stale.exists()
    assert prune_shuffles(str(out)) == [] and stale.exists()  # its files are new: it may still be writing
    later = time.time() + STALE_SECONDS + 60  # a day after its last write: interrupted
    assert prune_shuffles(str(out), now=later) == [stale.name] and not stale.exists()
    assert read_manifest(str(out)) == manifest  # the current generation is never pruned
    second = shuffle_once(lake, str(out), reshuffle=True)
    # A generation a run that may still resume has pinned is kept (the ledger's unfinished entries).
    assert prune_shuffles(str(out), keep=frozenset({manifest.row_order})) == []
    assert prune_shuffles(str(out)) == [manifest.generation]
    assert sorted(os.listdir(out)) == [second.generation, COMMITS]


def test_part_files_alone_are_not_an_earlier_layout_and_a_reshuffle_deletes_none_of_them(lake, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-00000.parquet").write_bytes(b"someone's own part file")
    with pytest.raises(LakeError, match=r"holds files a shuffle did not write \(part-00000.parquet\)"):
        shuffle_once(lake, str(out), reshuffle=True)
    assert (out / "part-00000.parquet").read_bytes() == b"someone's own part file"


def test_a_shuffle_of_the_earlier_single_folder_layout_is_replaced_only_by_a_reshuffle(lake, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "_manifest.json").write_text("{}")
    (out / "part-00000.parquet").write_bytes(b"an earlier dpstream's part")
    with pytest.raises(LakeError, match="earlier dpstream.*--reshuffle"):
        shuffle_once(lake, str(out))
    assert (out / "part-00000.parquet").exists()
    manifest = shuffle_once(lake, str(out), reshuffle=True)
    assert sorted(os.listdir(out)) == [manifest.generation, COMMITS]


def test_output_of_another_lake_refused(lake, tmp_path):
    out = str(tmp_path / "out")
    shuffle_once(lake, out)
    other_root = str(tmp_path / "other")
    write_lake(local_put, other_root, files=2, rows=100)
    with pytest.raises(LakeError, match="holds a shuffle of another lake.*--reshuffle"):
        shuffle_once(feature_spec(other_root), out)


def test_bad_rows_per_file(lake, tmp_path):
    with pytest.raises(LakeError, match="rows_per_file must be a positive integer"):
        shuffle_once(lake, str(tmp_path / "o"), rows_per_file=0)


def test_shuffle_on_cluster_matches_contract(lake, tmp_path, dask_client):
    reported = []
    manifest = shuffle_once(
        lake,
        str(tmp_path / "cluster"),
        rows_per_file=4000,
        client=dask_client,
        on_progress=lambda phase, rows: reported.append((phase, rows)),
    )
    assert [rows for _, rows in manifest.files] == [4000] * 5
    # Progress: one call per input file (scatter) and per output file (gather), each phase all rows.
    assert sorted(rows for phase, rows in reported if phase == "scatter") == [5000] * 4
    assert sorted(rows for phase, rows in reported if phase == "gather") == [4000] * 5
    assert sum(t.num_rows for t in output_tables(manifest)) == 20_000


def tree_checksums(root):
    """Every file under ``root`` (recursively) with its SHA-256."""
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            found[os.path.relpath(path, root)] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return found


@pytest.mark.parametrize("where", ["equal", "inside", "contains"])
def test_output_overlapping_the_source_is_refused_and_nothing_changes(tmp_path, where):
    project = tmp_path / "project"
    write_lake(local_put, str(project / "raw"), files=2, rows=500)
    (project / "notes.txt").write_text("keep me")
    before = tree_checksums(project)
    out = {"equal": project / "raw", "inside": project / "raw" / "shuffled", "contains": project}[where]
    with pytest.raises(LakeError, match="source lake"):
        shuffle_once(feature_spec(str(project / "raw")), str(out))
    assert tree_checksums(project) == before


def test_output_equal_to_or_containing_a_protected_folder_is_refused(lake, tmp_path):
    config_folder = tmp_path / "project" / "pipeline"
    config_folder.mkdir(parents=True)
    (config_folder / "pipeline.toml").write_text("# config")
    for out in (config_folder, tmp_path / "project"):
        with pytest.raises(LakeError, match="config's folder"):
            shuffle_once(lake, str(out), protected=(str(config_folder),))
    assert (config_folder / "pipeline.toml").read_text() == "# config"
    # A folder of its own beside the config is fine.
    assert (
        shuffle_once(lake, str(config_folder / "shuffled"), protected=(str(config_folder),)).num_rows
        == 20_000
    )


@pytest.mark.parametrize("reshuffle", [False, True])
def test_non_empty_folder_of_other_files_is_refused_and_kept(lake, tmp_path, reshuffle):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    (out / "part-00000.parquet").write_bytes(b"someone else's")  # looks like an earlier layout's part
    before = tree_checksums(out)
    with pytest.raises(
        LakeError,
        match=r"holds files a shuffle did not write \(part-00000.parquet, thesis.tex\); nothing was deleted",
    ):
        shuffle_once(lake, str(out), reshuffle=reshuffle)
    assert tree_checksums(out) == before


def test_reordered_columns_reuse_the_shuffle_in_the_new_order(lake, tmp_path):
    out = str(tmp_path / "out")
    first = shuffle_once(lake, out, rows_per_file=5000)
    reordered = feature_spec(lake.url)
    reordered = type(reordered)(lake.url, tuple(reversed(lake.features)), "y")
    again = shuffle_once(reordered, out, rows_per_file=5000)
    assert again.source_fingerprint == first.source_fingerprint and again.files == first.files
    assert again.features == tuple(reversed(first.features))
    subset = type(reordered)(lake.url, ("x1", "x0"), "y")
    assert shuffle_once(subset, out).num_features == 2
    wider = type(reordered)(lake.url, ("x0", "row_id"), "y")
    with pytest.raises(LakeError, match=r"without the column\(s\) row_id"):
        shuffle_once(wider, out)


def test_s3_output_overlapping_the_source_is_refused(s3_bucket):
    import s3fs

    url, options = s3_bucket
    fs = s3fs.S3FileSystem(**options)
    from .test_executor import s3_put

    write_lake(s3_put(fs), f"{url[5:]}/guarded/raw", files=2, rows=300)
    fs.pipe_file(f"{url[5:]}/guarded/keep.txt", b"keep")
    listing = lambda: {p: fs.info(p)["ETag"] for p in fs.find(f"{url[5:]}/guarded")}  # noqa: E731
    before = listing()
    spec = feature_spec(f"{url}/guarded/raw", **options)
    for out in (f"{url}/guarded/raw", f"{url}/guarded/raw/out", f"{url}/guarded"):
        with pytest.raises(LakeError, match="source lake"):
            shuffle_once(spec, out)
    fs.invalidate_cache()
    assert listing() == before
    fs.pipe_file(f"{url[5:]}/foreign/data.csv", b"a,b")
    with pytest.raises(LakeError, match="nothing was deleted"):
        shuffle_once(spec, f"{url}/foreign")
    fs.invalidate_cache()
    assert fs.cat_file(f"{url[5:]}/foreign/data.csv") == b"a,b"
    assert shuffle_once(spec, f"{url}/fresh").num_rows == 600


def _scatter_files(tmp_path, tables_and_counts):
    """Scratch files as scatter tasks write them (``write_scratch``); their ends, in source order."""
    from dpstream.pipelines.shuffle.scatter_gather import write_scratch

    return [
        write_scratch(str(tmp_path), {}, index, table, counts)
        for index, (table, counts) in enumerate(tables_and_counts)
    ]


def _punches_holes(folder) -> bool:
    from dpstream.storage import punch_hole

    probe = folder / "probe"
    probe.write_bytes(b"x" * 65_536)
    try:
        return punch_hole(str(probe), [(0, 65_536)]) and os.stat(probe).st_blocks == 0
    finally:
        probe.unlink()


def test_a_gather_run_twice_returns_the_part_the_first_run_wrote(tmp_path, monkeypatch):
    """Dask may run a task twice at once: the run whose exclusive create of the part fails (the other
    wrote it first, from the same rows) returns that part; a user-level gather retried after its part
    was written returns it, its people per row group counted from the person codes."""
    import numpy as np
    import pyarrow as pa

    import dpstream.pipelines.shuffle.rows as shuffle_module
    from dpstream.pipelines.shuffle.rows import gather_rows as _gather
    from dpstream.pipelines.shuffle.scatter_gather import output_slices
    from dpstream.pipelines.shuffle.users import _HASH_COLUMN, gather_users

    ends = _scatter_files(tmp_path, [(pa.table({"x": np.arange(6.0)}), [6])])
    real_write = shuffle_module.write_part

    def racing_write(fs, path, table, rows):
        real_write(fs, path, table, rows)  # the other run of this task, a moment earlier
        return real_write(fs, path, table, rows)  # FileExistsError: exclusive create

    monkeypatch.setattr(shuffle_module, "write_part", racing_write)
    part = _gather(str(tmp_path), {}, 0, seed=1, expected_rows=6, slices=output_slices(ends)[0])
    assert part.rows == 6 and sorted(pq.read_table(tmp_path / "part-00000.parquet")["x"].to_pylist()) == list(
        np.arange(6.0)
    )

    users = tmp_path / "users"
    hashes = np.array([5, 5, 9, 9, 9, 2, 5], dtype=np.uint64)  # three people of 3, 3 and 1 rows
    user_ends = _scatter_files(users, [(pa.table({"x": np.arange(7.0), _HASH_COLUMN: hashes}), [7])])
    written = gather_users(str(users), {}, 0, 3, 7, 2, 2, output_slices(user_ends)[0])  # k = 2
    assert written.rows == 5 and sum(written.users) == 3 and len(written.users) == len(written.row_groups)
    # Its slices are freed now: a retry that read them instead of returning the part would fail.
    assert gather_users(str(users), {}, 0, 3, 7, 2, 2, output_slices(user_ends)[0]) == written


def test_gather_reads_its_slice_of_every_scratch_file(tmp_path):
    """One scratch file per source file, a slice per output; output j's gather reads slice j of
    each by byte range (a source that sent output j no rows has no slice for it)."""
    import pyarrow as pa

    from dpstream.pipelines.shuffle.rows import gather_rows as _gather
    from dpstream.pipelines.shuffle.scatter_gather import output_slices

    ends = _scatter_files(
        tmp_path,
        [
            (pa.table({"x": [1.0, 2.0, 10.0]}), [2, 1, 0]),
            (pa.table({"x": [3.0, 4.0, 5.0, 11.0, 20.0]}), [3, 1, 1]),
        ],
    )
    assert [len(output_slices(ends)[j]) for j in range(3)] == [2, 2, 1]
    with pytest.raises(LakeError, match="would hold 5 rows, not the 6 its layout assigned"):
        _gather(str(tmp_path), {}, 0, seed=1, expected_rows=6, slices=output_slices(ends)[0])
    for target, expected in enumerate(([1.0, 2.0, 3.0, 4.0, 5.0], [10.0, 11.0], [20.0])):
        part = _gather(
            str(tmp_path), {}, target, seed=1, expected_rows=len(expected), slices=output_slices(ends)[target]
        )
        table = pq.read_table(tmp_path / f"part-{target:05d}.parquet")
        assert part.row_groups == (len(expected),) and sorted(table.column("x").to_pylist()) == expected
    assert part.identity.startswith("footer-sha256:") and part.size == os.path.getsize(
        tmp_path / "part-00002.parquet"
    )


def test_gather_frees_its_slices_and_a_retry_returns_the_written_part(tmp_path):
    """An output's slices are freed (holes punched) once its part is written, so the shuffle's
    disk peak is about twice the lake, not three times; a retried gather (its worker died after the
    write) returns the part as written; a slice that is gone is refused naming the scratch file."""
    import numpy as np
    import pyarrow as pa

    from dpstream.pipelines.shuffle.generations import SCRATCH
    from dpstream.pipelines.shuffle.rows import gather_rows as _gather
    from dpstream.pipelines.shuffle.scatter_gather import output_slices

    rows = 200_000  # 1.6 MB a column: whole filesystem blocks to free
    values = np.random.default_rng(0).random(rows)
    ends = _scatter_files(tmp_path, [(pa.table({"x": values}), [rows // 2, rows // 2])])
    scratch = tmp_path / SCRATCH / "from-00000.arrow"
    size, blocks = os.path.getsize(scratch), os.stat(scratch).st_blocks
    part = _gather(str(tmp_path), {}, 0, seed=1, expected_rows=rows // 2, slices=output_slices(ends)[0])
    assert os.path.getsize(scratch) == size  # output 1's slice stays where the scatter said
    # Output 0's half of the disk blocks is free, wherever the filesystem can punch holes at all.
    assert os.stat(scratch).st_blocks < 0.6 * blocks or not _punches_holes(tmp_path)
    # A retried gather (its worker died after the write, before the retry's freeing): the part as written.
    assert (
        _gather(str(tmp_path), {}, 0, seed=2, expected_rows=rows // 2, slices=output_slices(ends)[0]) == part
    )
    other = _gather(str(tmp_path), {}, 1, seed=1, expected_rows=rows // 2, slices=output_slices(ends)[1])
    read = np.concatenate(
        [pq.read_table(tmp_path / f"part-{j:05d}.parquet").column("x").to_numpy() for j in (0, 1)]
    )
    assert other.rows == rows // 2 and np.array_equal(np.sort(read), np.sort(values))
    with pytest.raises(LakeError, match="from-00000.arrow: bytes 0-.* are not the slice the scatter wrote"):
        _gather(str(tmp_path), {}, 2, seed=1, expected_rows=rows // 2, slices=output_slices(ends)[0])
    scratch.unlink()
    with pytest.raises(LakeError, match="the scratch file is gone or was changed"):
        _gather(str(tmp_path), {}, 3, seed=1, expected_rows=rows // 2, slices=output_slices(ends)[1])


def test_parts_compress_only_the_columns_snappy_shrinks(tmp_path):
    """Shuffled measurements do not compress, so their pages are stored plain (Snappy's pass
    was ~8 % of the shuffle and is paid again on every read); a one-hot or integer column still shrinks,
    and every value reads back unchanged either way."""
    import fsspec
    import numpy as np
    import pyarrow as pa

    from dpstream.pipelines.shuffle.scatter_gather import write_part

    rng = np.random.default_rng(3)
    rows = 20_000
    table = pa.table(
        {
            "measured": rng.standard_normal(rows).astype(np.float32),
            "one_hot": rng.integers(0, 2, rows).astype(np.float32),
            "count": rng.integers(0, 50, rows),
            "y": rng.standard_normal(rows),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(4 * rows)), 4),
            "one_hot_vector": pa.FixedSizeListArray.from_arrays(
                pa.array(rng.integers(0, 2, 4 * rows) * 1.0), 4
            ),
        }
    )
    path = str(tmp_path / "part-00000.parquet")
    write_part(fsspec.filesystem("file"), path, table, 8_192)
    metadata = pq.read_metadata(path)
    codecs = {
        metadata.schema.column(j).path: metadata.row_group(0).column(j).compression
        for j in range(metadata.num_columns)
    }
    assert codecs == {
        "measured": "UNCOMPRESSED",
        "one_hot": "SNAPPY",
        "count": "SNAPPY",
        "y": "UNCOMPRESSED",
        "vector.list.element": "UNCOMPRESSED",  # a vector column is a leaf of its own in Parquet
        "one_hot_vector.list.element": "SNAPPY",
    }
    assert pq.read_table(path).equals(table)
