"""Atomic writes on local disk and S3 (moto server): replace, exclusive create, readable errors."""

import pytest

from dpstream.storage import open_url, read_json, write_atomic, write_bytes_atomic, write_json_atomic


@pytest.fixture(params=["local", "s3"])
def target(request, tmp_path):
    if request.param == "local":
        return open_url(str(tmp_path / "docs"))
    url, options = request.getfixturevalue("s3_bucket")
    return open_url(f"{url}/docs", options)


def test_replace_and_exclusive_create(target):
    fs, root = target
    path = f"{root}/a.json"
    write_json_atomic(fs, path, {"v": 1}, exclusive=True)
    with pytest.raises(FileExistsError):
        write_json_atomic(fs, path, {"v": 2}, exclusive=True)
    assert read_json(fs, path) == {"v": 1}
    write_json_atomic(fs, path, {"v": 3})
    assert read_json(fs, path) == {"v": 3}


def test_local_write_is_all_or_nothing(tmp_path):
    fs, root = open_url(str(tmp_path))
    write_bytes_atomic(fs, f"{root}/x.bin", b"old")

    with pytest.raises(TypeError):
        write_bytes_atomic(fs, f"{root}/x.bin", object())  # not bytes: nothing replaced
    assert (tmp_path / "x.bin").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.bin"]


def test_a_streaming_writer_that_fails_midway_leaves_the_old_object(target):
    fs, root = target
    path = f"{root}/part.bin"
    write_atomic(fs, path, lambda handle: handle.write(b"old"))

    def fails_after_some_bytes(handle):
        handle.write(b"half of the new")
        raise RuntimeError("encoder failed")

    with pytest.raises(RuntimeError, match="encoder failed"):
        write_atomic(fs, path, fails_after_some_bytes)
    assert fs.cat_file(path) == b"old"
    assert [name.rsplit("/", 1)[-1] for name in fs.ls(root, detail=False)] == [
        "part.bin"
    ]  # no temporary left
    write_atomic(fs, path, lambda handle: [handle.write(b"new "), handle.write(b"object")])
    assert fs.cat_file(path) == b"new object"


def test_invalid_json_error_names_file(tmp_path):
    (tmp_path / "bad.json").write_text("[1, 2")
    fs, root = open_url(str(tmp_path))
    with pytest.raises(ValueError, match="bad.json"):
        read_json(fs, f"{root}/bad.json")


@pytest.mark.parametrize("bad", ["", "   ", None])
def test_bad_url(bad):
    with pytest.raises(ValueError, match="expected a local path or URL"):
        open_url(bad)


def test_an_object_store_that_ignores_conditional_writes_is_refused(s3_bucket, monkeypatch):
    """The ledger's claims and the shuffle's commits need a create that fails when the object exists."""
    import s3fs

    from dpstream.storage import _EXCLUSIVE_CHECKED, check_exclusive_create

    url, options = s3_bucket
    fs = s3fs.S3FileSystem(**options)
    root = f"{url[5:]}/ledger"
    check_exclusive_create(fs, root)  # moto honours If-None-Match: *
    assert fs.find(root) == []  # the probe leaves nothing behind
    _EXCLUSIVE_CHECKED.clear()
    plain = fs.pipe_file
    monkeypatch.setattr(fs, "pipe_file", lambda path, data, mode=None, **kw: plain(path, data, **kw))
    with pytest.raises(RuntimeError, match="ignores conditional writes"):
        check_exclusive_create(fs, root)
    _EXCLUSIVE_CHECKED.clear()


def test_local_files_get_the_umask_permissions_and_a_checkpoint_stays_private(tmp_path):
    """A shuffled part must be readable by workers of the owner's group (not mkstemp's 0600);
    a checkpoint holds the noise key and stays owner-only."""
    import os
    import stat

    import fsspec
    import numpy as np

    from dpstream.checkpoint import CheckpointPolicy, CheckpointStore, new_checkpoint
    from dpstream.noise import NoiseKey
    from dpstream.storage import process_umask, write_bytes_atomic

    old = os.umask(0o027)
    try:
        assert process_umask() == 0o027
        fs = fsspec.filesystem("file")
        write_bytes_atomic(fs, str(tmp_path / "part.parquet"), b"rows")
        write_bytes_atomic(fs, str(tmp_path / "secret"), b"key", private=True)
        assert stat.S_IMODE(os.stat(tmp_path / "part.parquet").st_mode) == 0o640
        assert stat.S_IMODE(os.stat(tmp_path / "secret").st_mode) == 0o600
        store = CheckpointStore(CheckpointPolicy(str(tmp_path / "checkpoints")))
        store.save(new_checkpoint("run-1", "fp", 0, {"params": np.zeros(3)}, NoiseKey.generate(), []))
        saved = [path for path in (tmp_path / "checkpoints").rglob("*") if path.is_file()]
        assert saved and all(stat.S_IMODE(os.stat(path).st_mode) == 0o600 for path in saved)
    finally:
        os.umask(old)
