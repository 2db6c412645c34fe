"""A person is one person however their id is spelled: case, surrounding spaces and invisible characters
are normalised before contributions are bounded, validation counts the spellings it merged, and the
manifest records the rule so a generation made under another one is not reused."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.person_ids import AS_STORED, id_rule, missing_ids, normalise_id, normalise_ids
from dpstream.pipelines import LakeError, LakeSpec, UserBounding, shuffle_once, validate_lake
from dpstream.pipelines.conversion.sample import person_sample_mask
from dpstream.pipelines.execution.executor import lake_blocks
from dpstream.pipelines.shuffle.users import keyed_hashes
from dpstream.pipelines.validation import persons as person_checks
from dpstream.pipelines.validation.persons import MergedIds

from .conftest import DIM

SPELLINGS = ["HEAVY", " HEAVY", "heavy", "HEAVY\u200b"]  # one per file, 100 rows each
K = 8
OTHERS = 60  # people of 1..5 rows each, spelled one way
FOLDED = "nfkc+strip+drop-format+casefold"

TRICKY = [
    "HEAVY",
    " HEAVY",
    "heavy",
    "HEAVY\u200b",
    "\ufeffHeavy\u2060 ",
    "\u200c\u200dheavy",
    "Ｈｅａｖｙ",  # full-width: NFKC
    "\u00a0heavy\u3000",  # no-break and ideographic spaces
    "Straße",
    "STRASSE",
    "ς",
    "Σ",
    "a\x1cb\x1c",  # str.strip's ASCII separators
    "x\u00ady",  # a soft hyphen (Cf)
    "İstanbul",
    "ﬁle",
    "plain-id-42",
]


def _table(ids: list[str], seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (len(ids), DIM))
    return pa.table(
        {**{f"x{j}": X[:, j] for j in range(DIM)}, "y": X.sum(axis=1), "customer": pa.array(ids, pa.string())}
    )


def _write_spelled_lake(root: str) -> dict[str, int]:
    """Four files, each holding 100 rows of the heavy person under one of ``SPELLINGS`` and its share of
    ``OTHERS`` people (1..5 rows each, one spelling); returns the others' rows."""
    os.makedirs(root)
    rng = np.random.default_rng(7)
    others = {f"cust-{u:04d}": int(rng.integers(1, 6)) for u in range(OTHERS)}
    names = list(others)
    for index, spelling in enumerate(SPELLINGS):
        mine = names[index::4]
        ids = [spelling] * 100 + [name for name in mine for _ in range(others[name])]
        pq.write_table(_table(ids, index), f"{root}/part-{index}.parquet")
    return others


def _spec(root: str, case_fold: bool = True) -> LakeSpec:
    features = tuple(f"x{j}" for j in range(DIM))
    return LakeSpec(root, features, "y", user_column="customer", user_id_case_fold=case_fold)


@pytest.fixture()
def spelled(tmp_path):
    root = str(tmp_path / "raw")
    return root, _write_spelled_lake(root)


def _rows_per_person(manifest) -> np.ndarray:
    counts = []
    for _, _, users in lake_blocks(manifest):
        counts.append(np.unique(users, return_counts=True)[1])
    return np.concatenate(counts)


@pytest.mark.parametrize("case_fold", [True, False])
def test_the_vectorised_rule_is_the_reference_rule(case_fold):
    values = pa.array([*TRICKY, None])
    expected = [normalise_id(text, case_fold) for text in TRICKY] + [None]
    assert normalise_ids(values, case_fold).to_pylist() == expected
    assert normalise_ids(values.cast(pa.large_string()), case_fold).to_pylist() == expected
    assert normalise_ids(values.dictionary_encode(), case_fold).to_pylist() == expected
    assert all(
        normalise_id(normalise_id(t, case_fold), case_fold) == normalise_id(t, case_fold) for t in TRICKY
    )


def test_what_the_rule_merges_and_keeps_apart():
    assert {normalise_id(text) for text in TRICKY[:8]} == {"heavy"}
    assert normalise_id("Straße") == normalise_id("STRASSE") == "strasse"
    assert normalise_id("ς") == normalise_id("Σ")
    assert {normalise_id(text, case_fold=False) for text in SPELLINGS} == {"HEAVY", "heavy"}
    assert normalise_id("x\u00ady") == "xy" and normalise_id("a\x1cb\x1c") == "a\x1cb"
    numbers = pa.array([7, 7, 12])
    assert normalise_ids(numbers) is numbers  # an integer id is used as stored
    assert id_rule(True) == FOLDED and id_rule(False) == "nfkc+strip+drop-format"
    assert id_rule(True, pa.int64()) == AS_STORED == id_rule(False, pa.binary())
    assert id_rule(True, pa.dictionary(pa.int32(), pa.string())) == FOLDED
    assert missing_ids(pa.array(["a", " ", "\u200b", None, "\ufeff b"])).tolist() == [
        False,
        True,
        True,
        True,
        False,
    ]


def test_every_spelling_hashes_alike_and_samples_alike():
    hashes = keyed_hashes(pa.array(SPELLINGS * 2), "0123456789abcdef")
    assert np.unique(hashes).size == 1
    assert np.unique(keyed_hashes(pa.array(SPELLINGS), "0123456789abcdef", case_fold=False)).size == 2
    # convert --user's public partition keeps every spelling of a person on one side
    masks = [person_sample_mask(pa.array(SPELLINGS), every) for every in (2, 3, 5, 7, 10)]
    assert all(mask.all() or not mask.any() for mask in masks)


def test_four_spellings_are_one_person_of_at_most_k_rows(spelled, tmp_path):
    root, others = spelled
    manifest = shuffle_once(
        _spec(root), str(tmp_path / "shuffled"), rows_per_file=200, users=UserBounding("customer", K)
    )
    rows = _rows_per_person(manifest)
    assert rows.max() == K and np.count_nonzero(rows == K) == 1  # the others hold at most 5 rows
    assert manifest.num_users == OTHERS + 1
    assert manifest.num_rows == sum(others.values()) + K  # not 4·K: the person is not four people
    assert manifest.unit.user_id_rule == FOLDED
    (record,) = (tmp_path / "shuffled" / "_generations").iterdir()
    assert json.loads(record.read_text())["unit"]["user_id_rule"] == FOLDED


def test_case_folding_off_keeps_heavy_apart(spelled, tmp_path):
    root, others = spelled
    manifest = shuffle_once(
        _spec(root, case_fold=False),
        str(tmp_path / "shuffled"),
        rows_per_file=200,
        users=UserBounding("customer", K),
    )
    rows = _rows_per_person(manifest)
    assert np.count_nonzero(rows == K) == 2  # HEAVY (three spellings, 300 rows) and heavy (100 rows)
    assert manifest.num_users == OTHERS + 2
    assert manifest.num_rows == sum(others.values()) + 2 * K
    assert manifest.unit.user_id_rule == "nfkc+strip+drop-format"


def test_validation_counts_the_merged_people(spelled):
    root, _ = spelled
    assert validate_lake(_spec(root)).merged_ids == MergedIds(people=1, spellings=3)
    # Without case folding "heavy" stays apart: HEAVY is reached by three spellings, heavy by one.
    assert validate_lake(_spec(root, case_fold=False)).merged_ids == MergedIds(people=1, spellings=2)


def test_a_lake_spelled_one_way_merges_nothing(tmp_path, monkeypatch):
    root = tmp_path / "clean"
    os.makedirs(root)
    for index in range(2):
        pq.write_table(_table([f"c{u}" for u in range(50)] * 2, index), root / f"part-{index}.parquet")
    read_again = []
    monkeypatch.setattr(person_checks, "count_merged_ids", lambda *args: read_again.append(args))
    assert validate_lake(_spec(str(root))).merged_ids == MergedIds()
    assert read_again == []  # no id changed by the rule: the id columns are not read a second time


def test_the_cache_keeps_the_count_for_the_lakes_content(spelled, tmp_path, monkeypatch):
    from dpstream.pipelines.shuffle.location import validation_cache

    root, _ = spelled
    spec, shuffled = _spec(root), str(tmp_path / "shuffled")
    assert validate_lake(spec, cache=validation_cache(shuffled, spec, None)).merged_ids.people == 1
    counted = []
    monkeypatch.setattr(person_checks, "count_merged_ids", lambda *args: counted.append(args) or MergedIds())
    assert validate_lake(spec, cache=validation_cache(shuffled, spec, None)).merged_ids == MergedIds(1, 3)
    assert counted == []  # the ids were not read again
    table = pq.read_table(f"{root}/part-3.parquet")
    pq.write_table(table.slice(1), f"{root}/part-3.parquet")  # another lake: counted again
    validate_lake(spec, cache=validation_cache(shuffled, spec, None))
    assert len(counted) == 1


def test_an_id_of_only_invisible_characters_is_a_missing_id(spelled):
    root, _ = spelled
    path = f"{root}/part-2.parquet"
    table = pq.read_table(path)
    ids = table.column("customer").to_pylist()
    ids[3] = "\u200b \u2060"
    pq.write_table(
        table.set_column(table.schema.get_field_index("customer"), "customer", pa.array(ids)), path
    )
    with pytest.raises(
        LakeError, match=r"part-2\.parquet: row 3 of privacy.user_column 'customer' is missing"
    ):
        validate_lake(_spec(root))


def test_a_generation_formed_by_another_rule_is_not_reused(spelled, tmp_path):
    root, _ = spelled
    out = str(tmp_path / "shuffled")
    users = UserBounding("customer", K)
    first = shuffle_once(_spec(root), out, rows_per_file=200, users=users)
    assert shuffle_once(_spec(root), out, rows_per_file=200, users=users).generation == first.generation
    with pytest.raises(LakeError, match=r"rule 'nfkc\+strip\+drop-format\+casefold'.*--reshuffle") as refused:
        shuffle_once(_spec(root, case_fold=False), out, rows_per_file=200, users=users)
    assert "'nfkc+strip+drop-format'" in str(refused.value)
    # A generation from before ids were normalised records no rule: its people are the stored spellings.
    (record,) = (tmp_path / "shuffled" / "_generations").iterdir()
    document = json.loads(record.read_text())
    del document["unit"]["user_id_rule"]
    record.write_text(json.dumps(document))
    with pytest.raises(LakeError, match=r"rule 'as-stored', but this config forms them by 'nfkc"):
        shuffle_once(_spec(root), out, rows_per_file=200, users=users)


def test_integer_ids_are_used_as_stored(tmp_path):
    root = tmp_path / "numbers"
    os.makedirs(root)
    rng = np.random.default_rng(3)
    for index in range(2):
        X = rng.uniform(-1, 1, (300, DIM))
        ids = rng.integers(0, 40, 300)
        table = pa.table({**{f"x{j}": X[:, j] for j in range(DIM)}, "y": X.sum(axis=1), "customer": ids})
        pq.write_table(table, root / f"part-{index}.parquet")
    spec = _spec(str(root))
    assert validate_lake(spec).merged_ids == MergedIds()
    manifest = shuffle_once(
        spec, str(tmp_path / "shuffled"), rows_per_file=200, users=UserBounding("customer", 4)
    )
    assert manifest.unit.user_id_rule == AS_STORED


def test_the_cluster_counts_the_merged_people_as_here(spelled, dask_client):
    root, _ = spelled
    summary = validate_lake(_spec(root), client=dask_client)
    assert summary.merged_ids == MergedIds(people=1, spellings=3)


def test_an_estimators_text_groups_name_people_by_the_same_rule():
    """fit(X, y, groups=ids): the four spellings are one person there too, kept to k rows."""
    from dpstream import DPLinearRegression
    from dpstream.person_ids import people_of

    rng = np.random.default_rng(3)
    rows = 2400
    ids = np.array([f"user{i % 500}" for i in range(rows)], dtype=object)
    ids[:400] = SPELLINGS * 100
    people = people_of(ids)
    assert set(people[:400]) == {"heavy"} and len(set(people)) == 501
    assert people_of(np.arange(5)).tolist() == [0, 1, 2, 3, 4]  # integer ids as stored
    # A missing id names nobody: it never joins a person (the bounding then refuses it).
    assert people_of(np.array(["bob", None, "alice", " \u200b"], dtype=object)).tolist() == [
        "bob",
        None,
        "alice",
        None,
    ]
    estimator = DPLinearRegression(epsilon=1.0, max_rows_per_user=8)
    X = rng.standard_normal((rows, 3))
    kept = estimator._bound_users(X, X @ [1.0, 2.0, 3.0], ids, rows)
    heavy_rows = np.isin(kept[0][:, 0], X[:400, 0]).sum()
    assert heavy_rows == 8 and kept[3] == 501  # one person of 8 rows, not four of 8 each
