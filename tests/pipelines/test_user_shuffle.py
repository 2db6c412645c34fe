"""Contribution bounding in the shuffle: a Zipf panel with one person of 10⁴ rows, bounded to
k rows per person, laid out person by person, ids never written; the executors read people."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dpstream.algorithms import DPSGD, AdaSSP
from dpstream.coordinator import InMemoryExecutor, execute
from dpstream.models import LinearRegressionModel
from dpstream.noise import NoiseKey
from dpstream.pipelines import LakeError, UserBounding, shuffle_once, validate_lake
from dpstream.pipelines.execution.executor import lake_blocks
from dpstream.pipelines.execution.train import plan_on_lake, train_on_lake
from dpstream.pipelines.shuffle.manifest import USER_CODE_COLUMN, Manifest
from dpstream.pipelines.shuffle.users import BINS, choose_max_rows, user_row_groups
from dpstream.privacy import PrivacyUnit
from tests.pipelines.conftest import (
    DIM,
    HEAVY_PERSON,
    HEAVY_ROWS,
    ID_PREFIX,
    local_put,
    user_spec,
    write_user_lake,
)

K = 16


@pytest.fixture()
def people_lake(tmp_path):
    root = str(tmp_path / "raw")
    rows = write_user_lake(local_put, root)
    return user_spec(root), rows


def assert_no_id_written(root) -> None:
    """Every file under ``root``, byte by byte: no id in clear (the ids are strings 'cust-…')."""
    scanned = 0
    for folder, _, names in os.walk(root):
        for name in names:
            data = Path(folder, name).read_bytes()
            assert ID_PREFIX not in data, f"an id is written in clear in {folder}/{name}"
            scanned += 1
    assert scanned > 0


def test_each_person_keeps_at_most_k_rows_in_one_block(people_lake, tmp_path):
    spec, rows = people_lake
    assert rows[HEAVY_PERSON] == HEAVY_ROWS
    manifest = shuffle_once(
        spec, str(tmp_path / "shuffled"), rows_per_file=4000, users=UserBounding("customer", K)
    )
    assert manifest.unit.max_rows_per_user == K and manifest.unit.requested == K
    # Every person is kept, with min(k_u, k) rows: the kept rows are exactly that many.
    assert manifest.num_users == len(rows)
    assert manifest.num_rows == sum(min(count, K) for count in rows.values())
    assert manifest.source_rows == sum(rows.values())
    seen = 0
    for block, part_users in zip(
        lake_blocks(manifest), [u for p in manifest.parts for u in p.users], strict=True
    ):
        X, y, users = block
        codes, counts = np.unique(users, return_counts=True)
        assert codes[0] == seen and np.all(np.diff(codes) == 1), (
            "codes ascend through the lake, one block per person"
        )
        assert codes.size == part_users and counts.max() <= K
        assert np.all(np.diff(users) >= 0)  # each person's rows contiguous
        seen = codes[-1] + 1
    assert seen == manifest.num_users
    assert_no_id_written(tmp_path / "shuffled")


def test_the_parts_hold_person_codes_never_ids(people_lake, tmp_path):
    spec, _ = people_lake
    manifest = shuffle_once(
        spec, str(tmp_path / "out"), rows_per_file=4000, users=UserBounding("customer", K)
    )
    for path in manifest.paths():
        schema = pq.read_schema(path)
        assert "customer" not in schema.names and USER_CODE_COLUMN in schema.names
    document = json.loads(Path(tmp_path / "out" / "_generations" / "000001.json").read_text())
    assert document["format"] == "dpstream-shuffle/3" and document["unit"]["user_column"] == "customer"
    again = Manifest.from_json(document, manifest.url, "the test")
    assert again.unit == manifest.unit and again.num_users == manifest.num_users


def test_auto_k_is_charged_once_per_generation(people_lake, tmp_path):
    spec, rows = people_lake
    charges = []
    bounding = UserBounding("customer", "auto")
    first = shuffle_once(
        spec, str(tmp_path / "out"), rows_per_file=4000, users=bounding, charge=lambda *c: charges.append(c)
    )
    assert charges == [(f"max-rows{first.generation}", bounding.auto_mu)]
    k = first.unit.max_rows_per_user
    assert k in {2**b for b in range(BINS)} and first.unit.charge_id == charges[0][0]
    # The heavy person is bounded; 90 % of the people keep every row (up to the noise: a power of two above).
    assert first.num_rows < sum(rows.values()) and k < HEAVY_ROWS
    reused = shuffle_once(
        spec, str(tmp_path / "out"), rows_per_file=4000, users=bounding, charge=lambda *c: charges.append(c)
    )
    assert reused.generation == first.generation and len(charges) == 1


def test_auto_k_without_a_ledger_is_refused(people_lake, tmp_path):
    spec, _ = people_lake
    with pytest.raises(LakeError, match="charged to the lake's ledger"):
        shuffle_once(spec, str(tmp_path / "out"), users=UserBounding("customer", "auto"))
    assert not (tmp_path / "out" / "_generations").exists() or not os.listdir(
        tmp_path / "out" / "_generations"
    )


def test_the_auto_bound_lands_on_the_quantile():
    """A panel of 600 people of 7 rows: the 90 % quantile's power of two is 8. Measured over 200 draws at
    the default μ: 8 in 94 % of them; asserted in ≥ 80 % of 100."""
    histogram = np.bincount(np.full(600, 3), minlength=BINS)  # ceil(log2 7) = 3
    rng = np.random.default_rng(5)
    picks = [choose_max_rows(histogram, UserBounding("id", "auto"), rng) for _ in range(100)]
    assert np.mean(np.array(picks) == 8) >= 0.8
    assert min(picks) >= 4  # never far below: the bins below 8 hold no one


def test_row_groups_end_on_a_person():
    groups = user_row_groups(np.array([3, 5, 2, 9, 1]), target_rows=6)
    assert groups == [(8, 2), (11, 2), (1, 1)]
    assert sum(rows for rows, _ in groups) == 20 and sum(people for _, people in groups) == 5


def test_a_row_run_never_reads_a_user_shuffle(people_lake, tmp_path):
    spec, _ = people_lake
    out = str(tmp_path / "out")
    shuffle_once(spec, out, rows_per_file=4000, users=UserBounding("customer", K))
    rows_spec = user_spec(spec.url)
    rows_spec = type(rows_spec)(rows_spec.url, rows_spec.features, rows_spec.label)
    with pytest.raises(LakeError, match="user-level shuffle of this lake.*trains on rows"):
        shuffle_once(rows_spec, out, rows_per_file=4000)
    with pytest.raises(LakeError, match="max_rows_per_user = 8"):
        shuffle_once(spec, out, rows_per_file=4000, users=UserBounding("customer", 8))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: t.drop_columns(["customer"]), "privacy.user_column 'customer' is missing"),
        (
            lambda t: t.set_column(
                t.schema.get_field_index("customer"), "customer", pa.array(np.arange(t.num_rows) * 0.5)
            ),
            "has type double",
        ),
        (
            lambda t: t.set_column(
                t.schema.get_field_index("customer"),
                "customer",
                pa.array([None] + t.column("customer").to_pylist()[1:], pa.string()),
            ),
            r"row 0 of privacy.user_column 'customer' is missing \(null or empty\)",
        ),
        (
            lambda t: t.set_column(
                t.schema.get_field_index("customer"),
                "customer",
                pa.array(t.column("customer").to_pylist()[:5] + [""] + t.column("customer").to_pylist()[6:]),
            ),
            r"row 5 of privacy.user_column 'customer' is missing \(null or empty\)",
        ),
    ],
    ids=["missing", "float", "null", "empty"],
)
def test_a_bad_id_column_is_refused_by_name(people_lake, change, message):
    spec, _ = people_lake
    path = f"{spec.url}/part=01.parquet"
    pq.write_table(change(pq.read_table(path)), path)
    with pytest.raises(LakeError, match=message) as refused:
        validate_lake(spec)
    assert "part=01.parquet" in str(refused.value)


def test_the_id_column_is_never_a_feature(people_lake):
    spec, _ = people_lake
    with pytest.raises(LakeError, match="is a feature"):
        type(spec)(spec.url, (*spec.features, "customer"), spec.label, user_column="customer")
    with pytest.raises(LakeError, match="is the label"):
        type(spec)(spec.url, spec.features, "customer", user_column="customer")


def fit_in_memory(manifest, plan, key):
    executor = InMemoryExecutor(plan.model, lake_blocks(manifest), by_user=True)
    return execute(plan, executor, initial_params=np.zeros(DIM), key=key).params


PER_PERSON = PrivacyUnit.user("customer", K)
USER_ALGORITHMS = {
    "ssp": AdaSSP(2.0, 1e-6, row_norm_bound=np.sqrt(DIM), unit=PER_PERSON),
    "dpsgd": DPSGD(2.0, 1e-6, clip_norm=1.0, learning_rate=0.5, batch_size=128, unit=PER_PERSON),
}


@pytest.mark.parametrize("name", USER_ALGORITHMS)
@pytest.mark.parametrize("mode", ["scatter", "streaming"])
def test_the_cluster_fits_people_as_in_memory(people_lake, tmp_path, dask_client, mode, name):
    spec, _ = people_lake
    manifest = shuffle_once(
        spec, str(tmp_path / "out"), rows_per_file=4000, users=UserBounding("customer", K)
    )
    algorithm = USER_ALGORITHMS[name]
    plan = plan_on_lake(manifest, algorithm, LinearRegressionModel())
    assert plan.num_rows == manifest.num_users  # the plan counts people
    key = NoiseKey.generate()
    result, used = train_on_lake(manifest, plan, dask_client, key, mode=mode)
    assert used == mode
    assert result.params.tobytes() == fit_in_memory(manifest, plan, key).tobytes()
    assert "one user" in result.report.unit and result.report.ledger_unit == "user:customer"


def test_a_row_plan_is_refused_on_people(people_lake, tmp_path, dask_client):
    from dpstream.run_plan import PlanMismatchError

    spec, _ = people_lake
    manifest = shuffle_once(
        spec, str(tmp_path / "out"), rows_per_file=4000, users=UserBounding("customer", K)
    )
    plan = plan_on_lake(manifest, AdaSSP(2.0, 1e-6, row_norm_bound=np.sqrt(DIM)), LinearRegressionModel())
    with pytest.raises(PlanMismatchError, match="privacy unit is the row"):
        train_on_lake(manifest, plan, dask_client, NoiseKey.generate(), mode="streaming")


def test_a_user_shuffle_on_s3_writes_no_id(s3_bucket):
    import s3fs

    root, options = s3_bucket
    fs = s3fs.S3FileSystem(**options)

    def put(path, table):
        with fs.open(path, "wb") as handle:
            pq.write_table(table, handle)

    rows = write_user_lake(put, f"{root}/raw")
    spec = user_spec(f"{root}/raw", **options)
    manifest = shuffle_once(spec, f"{root}/shuffled", rows_per_file=4000, users=UserBounding("customer", K))
    assert manifest.num_users == len(rows) and manifest.num_rows == sum(min(c, K) for c in rows.values())
    written = fs.find(f"{root}/shuffled")
    assert written
    for path in written:
        assert ID_PREFIX not in fs.cat_file(path), path
    assert sum(1 for block in lake_blocks(manifest, options) for _ in [block]) == sum(
        len(p.users) for p in manifest.parts
    )


def test_the_hash_key_never_shows_in_a_repr():
    """Dask logs a failed task's arguments: the key that travels to the scatter tasks prints as a mask."""
    import pickle

    from dpstream.pipelines.shuffle.users import keyed_hashes, new_key

    key = new_key()
    assert repr(key) == str(key) == "HashKey(<secret>)" and key.value not in repr((key, "args"))
    again = pickle.loads(pickle.dumps(key))
    ids = pa.array(["a", "b", "a"])
    assert keyed_hashes(ids, again).tolist() == keyed_hashes(ids, key).tolist()
    assert keyed_hashes(ids, new_key())[0] != keyed_hashes(ids, key)[0]  # a fresh key, fresh pseudonyms
