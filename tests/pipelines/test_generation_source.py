"""A committed generation is checked against the source it was shuffled from before it is used: a
manifest edited to carry another lake's generation under this lake's fingerprint is refused before
anything is trained or charged."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from dpstream.pipelines import LakeError, shuffle_once, validate_lake

from .conftest import feature_spec, local_put, make_table


def _graft(out_of_other: str, out: str, summary) -> str:
    """Copy the other lake's committed generation into ``out`` as its first generation, its manifest edited
    to carry this lake's fingerprint and URL (its source files still the other lake's). Returns the
    generation's name."""
    (record,) = os.listdir(os.path.join(out_of_other, "_generations"))
    document = json.loads(Path(out_of_other, "_generations", record).read_text())
    shutil.copytree(
        os.path.join(out_of_other, document["generation"]), os.path.join(out, document["generation"])
    )
    document["source_fingerprint"] = summary.fingerprint
    document["source_url"] = summary.spec.url
    os.makedirs(os.path.join(out, "_generations"))
    with open(os.path.join(out, "_generations", "000001.json"), "w") as handle:
        json.dump(document, handle)
    return document["generation"]


@pytest.fixture()
def other_lake(tmp_path):
    """Another lake of the same layout (four files of 5,000 rows), with other rows."""
    root = str(tmp_path / "other")
    for index in range(4):
        local_put(os.path.join(root, f"day={index:02d}.parquet"), make_table(5000, 10 + index))
    return feature_spec(root)


def test_a_manifest_carrying_another_lakes_generation_is_refused(lake, other_lake, tmp_path):
    summary = validate_lake(lake)
    other = shuffle_once(other_lake, str(tmp_path / "other-shuffled"), rows_per_file=5000)
    assert other.source_fingerprint != summary.fingerprint
    out = str(tmp_path / "shuffled")
    generation = _graft(str(tmp_path / "other-shuffled"), out, summary)
    for pinned in (None, generation):  # the current generation, and a resumed run's pinned one
        with pytest.raises(LakeError) as refused:
            shuffle_once(lake, out, summary=summary, generation=pinned)
        message = str(refused.value)
        assert f"{out}/_generations/000001.json records the fingerprint" in message, message
        assert "source file identities differ" in message and "--reshuffle" in message
    # The fix named works: a reshuffle commits this lake's own generation after the grafted one.
    fixed = shuffle_once(lake, out, summary=summary, reshuffle=True, rows_per_file=5000)
    assert fixed.number == 2 and fixed.source_files == summary.file_identities
    assert shuffle_once(lake, out, summary=summary).generation == fixed.generation


def test_a_manifest_whose_source_files_were_edited_is_refused(lake, tmp_path):
    out = str(tmp_path / "shuffled")
    manifest = shuffle_once(lake, out, rows_per_file=5000)
    record = Path(out, "_generations", "000001.json")
    document = json.loads(record.read_text())
    document["source_files"] = document["source_files"][:-1]
    record.write_text(json.dumps(document))
    with pytest.raises(
        LakeError, match=r"000001\.json records the fingerprint .*1 source file identity differs"
    ):
        shuffle_once(lake, out)
    assert len(manifest.source_files) == 4
    # One identity replaced by another is one that differs, not two.
    document["source_files"] = [*manifest.source_files[:-1], "md5:" + "0" * 32]
    record.write_text(json.dumps(document))
    with pytest.raises(LakeError, match=r"\(1 source file identity differs\)"):
        shuffle_once(lake, out)
