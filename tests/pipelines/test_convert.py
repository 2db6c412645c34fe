"""CSV → Parquet with explicit column, missing-value and categorical policies; real California data."""

import os
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from dpstream.pipelines import LakeError, LakeSpec, validate_lake
from dpstream.pipelines.conversion.convert import csv_to_parquet, read_convert_record
from dpstream.pipelines.preprocessing.spec import ConvertSpec
from examples.california import SPEC as CALIFORNIA
from examples.data import CALIFORNIA_HOUSING as HOUSING

NUMERIC = CALIFORNIA.columns  # the numeric columns of housing.csv (examples/california)
OCEAN = ("<1H OCEAN", "INLAND", "ISLAND", "NEAR BAY", "NEAR OCEAN")  # public category list


def housing_spec(**overrides):
    kwargs = dict(
        columns=NUMERIC,
        label="median_house_value",
        categorical={"ocean_proximity": OCEAN},
        rows_per_file=8000,
    )
    kwargs.update(overrides)
    return ConvertSpec(**kwargs)


def test_california_drop_missing(tmp_path):
    out = str(tmp_path / "lake")
    paths = csv_to_parquet(str(HOUSING), out, housing_spec())
    assert [os.path.basename(p) for p in paths] == [
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]
    table = pq.read_table(out)
    assert table.num_rows == 20_433  # the 207 rows with a missing total_bedrooms are dropped
    onehot = [f"ocean_proximity={v}" for v in OCEAN]
    assert all(sum(table.column(c).to_numpy()) > 0 for c in onehot)
    assert (sum(table.column(c).to_numpy() for c in onehot) == 1).all()
    summary = validate_lake(LakeSpec(out, tuple(NUMERIC) + tuple(onehot), "median_house_value"))
    assert summary.num_rows == 20_433 and summary.num_features == 13
    assert os.path.getsize(HOUSING) > 0 and sorted(os.listdir(out)) == ["_convert.json"] + [
        os.path.basename(p) for p in paths
    ]
    record = read_convert_record(out)  # the public preprocessing, for whoever applies a model trained on it
    assert record["features"] == list(NUMERIC) + onehot and record["categorical"] == {
        "ocean_proximity": list(OCEAN)
    }
    assert (
        record["source"] == "housing.csv"
        and validate_lake(LakeSpec(out, tuple(NUMERIC), "median_house_value")).stray_files == ()
    )


def test_california_impute_public_constant(tmp_path):
    out = str(tmp_path / "lake")
    csv_to_parquet(str(HOUSING), out, housing_spec(missing="impute", impute_values={"total_bedrooms": 400.0}))
    table = pq.read_table(out)
    assert table.num_rows == 20_640
    assert (table.column("total_bedrooms").to_numpy() == 400.0).sum() >= 207


@pytest.mark.parametrize(
    "overrides, match",
    [
        (
            dict(require_bounds=True, bounds={"longitude": (-124.5, -114.0)}, unscaled=NUMERIC[2:]),
            r"no public bounds for 'latitude', 'median_house_value'.*--bounds latitude=LOW,HIGH median_house_value=LOW,HIGH",
        ),
        (
            dict(unscaled=("median_house_value", "ocean_proximity")),
            r"unscaled names column 'ocean_proximity', which is neither",
        ),
        (
            dict(bounds={"latitude": (32.5, 42.0)}, unscaled=("latitude",)),
            r"column 'latitude' has bounds and is also listed as unscaled",
        ),
        (dict(columns=NUMERIC + ("rooms_per_person",)), r"column 'rooms_per_person' is not in the CSV"),
        (
            dict(columns=NUMERIC + ("ocean_proximity",), categorical={}),
            r"column 'ocean_proximity' is not numeric",
        ),
        (dict(categorical={"ocean_proximity": OCEAN[:3]}), r"category 'NEAR BAY' not in the public list"),
        (
            dict(missing="impute"),
            r"column 'total_bedrooms' has a missing value at row 290 \(line 292 of the file\) and no imputation constant",
        ),
    ],
)
def test_bad_conversions_write_nothing(tmp_path, overrides, match):
    out = tmp_path / "lake"
    with pytest.raises(LakeError, match=match):
        csv_to_parquet(str(HOUSING), str(out), housing_spec(**overrides))
    assert not out.exists() or not any(out.iterdir())


def test_unknown_categories_can_be_dropped(tmp_path):
    out = str(tmp_path / "lake")
    csv_to_parquet(
        str(HOUSING), out, housing_spec(categorical={"ocean_proximity": ("INLAND",)}, unknown_category="drop")
    )
    assert pq.read_table(out).num_rows == sum(
        1 for line in open(HOUSING) if ",INLAND" in line and ",," not in line
    )


def test_bad_spec_and_locations(tmp_path):
    with pytest.raises(LakeError, match="missing must be 'drop' or 'impute'"):
        housing_spec(missing="mean")
    # A constant under missing='drop' would be ignored for numbers: refused, for categories too.
    for constant in ({"total_bedrooms": 400.0}, {"ocean_proximity": "INLAND"}):
        with pytest.raises(LakeError, match=r"apply only with missing='impute' \(--missing impute\)"):
            housing_spec(missing="drop", impute_values=constant)
    with pytest.raises(LakeError, match="needs its public list"):
        housing_spec(categorical={"ocean_proximity": ()})
    with pytest.raises(LakeError, match="does not exist"):
        csv_to_parquet(str(tmp_path / "none.csv"), str(tmp_path / "o"), housing_spec())
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(LakeError, match="is not empty"):
        csv_to_parquet(str(HOUSING), str(tmp_path / "full"), housing_spec())
    # Inside a lake (Parquet files, a conversion record, a Delta log): its readers would read the new rows too.
    for marker in ("part-0.parquet", "_convert.json", "_delta_log"):
        lake = tmp_path / f"lake-{marker}"
        lake.mkdir()
        (lake / marker).write_text("x")
        with pytest.raises(LakeError, match=r"lies inside .*lake-.*, which holds a lake .* outside it$"):
            csv_to_parquet(str(HOUSING), str(lake / "day=1" / "sub"), housing_spec())
        assert not (lake / "day=1").exists()  # nothing written


def test_public_bounds_clip_and_scale_to_unit_range(tmp_path):
    out = str(tmp_path / "lake")
    bounds = {
        "total_rooms": (0.0, 10_000.0),
        "median_income": (0.0, 15.0),
        "median_house_value": (0.0, 500_001.0),
    }
    csv_to_parquet(str(HOUSING), out, housing_spec(bounds=bounds))
    table = pq.read_table(out)
    rooms = table.column("total_rooms").to_numpy()
    assert rooms.min() >= 0.0 and rooms.max() == 1.0  # 39,320 rooms is clipped to the public 10,000
    first = next(line for line in open(HOUSING) if line.startswith("-122.23,37.88"))
    assert rooms[0] == pytest.approx(880.0 / 10_000.0)  # the CSV's first row, unshuffled
    assert table.column("median_house_value").to_numpy()[0] == pytest.approx(
        float(first.split(",")[8]) / 500_001.0
    )
    assert table.column("longitude").to_numpy()[0] == -122.23  # columns without bounds are unchanged


@pytest.mark.parametrize(
    "bounds, match",
    [
        ({"rooms": (0.0, 1.0)}, r"bounds name column 'rooms', which is neither"),
        ({"total_rooms": (5.0, 5.0)}, r"low < high"),
    ],
)
def test_bad_bounds(bounds, match):
    with pytest.raises(LakeError, match=match):
        housing_spec(bounds=bounds)


def test_required_bounds_are_met_by_bounds_or_unscaled(tmp_path):
    out = str(tmp_path / "lake")
    spec = housing_spec(
        missing="impute",
        impute_values={"total_bedrooms": 400.0},
        require_bounds=True,
        scale_range=(-1.0, 1.0),
        bounds={"longitude": (-124.5, -114.0), "latitude": (32.5, 42.0)},
        unscaled=NUMERIC[2:] + ("median_house_value",),
    )
    assert spec.unbounded_columns() == []
    table = pq.read_table(csv_to_parquet(str(HOUSING), out, spec)[0])
    assert (
        -1.0 <= table.column("latitude").to_numpy().min() and table.column("latitude").to_numpy().max() <= 1.0
    )
    assert table.column("total_rooms").to_numpy().max() > 1_000  # unscaled: as in the CSV


def test_schema_row_norm_bound_holds_for_every_converted_row(tmp_path):
    """The bound comes from the record alone; every row the conversion wrote lies within it, and a one-hot
    group counts 1 (California: 8 columns on [−1, 1] plus one group → 3, not sqrt(13))."""
    import numpy as np

    out = str(tmp_path / "lake")
    spec = CALIFORNIA  # public bounds, scale_range (−1, 1), ocean_proximity one-hot
    csv_to_parquet(str(HOUSING), out, spec)
    restored = ConvertSpec.from_record(read_convert_record(out))
    features = restored.output_columns()
    bound = restored.row_norm_bound(features)
    assert bound == pytest.approx(3.0)
    rows = np.column_stack([pq.read_table(out).column(c).to_numpy() for c in features])
    norms = np.linalg.norm(rows, axis=1)
    assert norms.max() <= bound + 1e-12 and norms.max() > 0.9 * bound  # tight, not merely valid
    assert restored.row_norm_bound(features[:9]) == pytest.approx(
        3.0
    )  # one one-hot column: still the group's 1
    assert restored.row_norm_bound(features[:8]) == pytest.approx(np.sqrt(8.0))
    assert restored.row_norm_bound([*features, "rooms_per_person"]) is None  # not written by this conversion
    unit = housing_spec(bounds={"median_income": (0.0, 15.0)}, scale_range=(0.0, 1.0), unscaled=NUMERIC[:-1])
    assert unit.row_norm_bound(unit.output_columns()) == pytest.approx(3.0)  # unscaled columns count 1


def test_private_bounds_leave_their_sample_out_of_the_lake(tmp_path):
    """Every 10th CSV row is spent on the DP histograms and never written; the released bounds cover the
    bulk of each column (the label's tails clipped least), recorded with their guarantee, and the lake's
    rows are exactly the other rows converted
    with those bounds (so ``from_record`` prepares new rows as the lake was prepared)."""
    import numpy as np
    import pandas as pd

    from dpstream.bounds import default_edges
    from dpstream.pipelines.preprocessing.private_bounds import PrivateBoundsRequest

    out = str(tmp_path / "lake")
    request = PrivateBoundsRequest(
        ("median_income", "median_house_value"), label="median_house_value", epsilon=1.0, delta=1e-6
    )
    spec = housing_spec(
        columns=("median_income", "housing_median_age"),
        bounds={"housing_median_age": (0.0, 60.0)},
        scale_range=(-1.0, 1.0),
        private_bounds=request,
        require_bounds=True,  # satisfied by the private request
    )
    csv_to_parquet(str(HOUSING), out, spec)
    record = read_convert_record(out)
    frame = pd.read_csv(HOUSING)
    kept = frame[np.arange(len(frame)) % 10 != 0]
    table = pq.read_table(out)
    assert table.num_rows == len(kept) == 20_640 - 2_064
    private = record["private_bounds"]
    assert private["columns"] == ["median_income", "median_house_value"] and private["sample_rows"] == 2_064
    assert private["epsilon"] == 1.0 and "not in the lake" in private["guarantee"]
    edges = default_edges()
    # A feature's tails are clipped up to q = 3/√2,064 ≈ 6.6 % each; the label's at most 2 %.
    for column, least in (("median_income", 0.8), ("median_house_value", 0.95)):
        low, high = record["bounds"][column]
        assert edges[0] <= low < high <= edges[-1]
        inside = kept[column].between(low, high).mean()
        assert inside > least, (column, low, high, inside)
    assert record["bounds"]["housing_median_age"] == [0.0, 60.0]  # public bounds untouched
    low, high = record["bounds"]["median_income"]
    expected = -1 + 2 * (np.clip(kept["median_income"].to_numpy(), low, high) - low) / (high - low)
    np.testing.assert_allclose(table.column("median_income").to_numpy(), expected)
    restored = ConvertSpec.from_record(record)
    assert restored.private_bounds is None and restored.bounds["median_income"] == (low, high)


def test_private_bounds_refusals_write_nothing(tmp_path):
    from dpstream.pipelines.preprocessing.private_bounds import PrivateBoundsRequest

    out = tmp_path / "lake"
    with pytest.raises(LakeError, match="neither a selected numeric feature column nor the label"):
        housing_spec(private_bounds=PrivateBoundsRequest(("rooms",)))
    with pytest.raises(LakeError, match="also named for private bounds"):
        housing_spec(
            bounds={"median_income": (0.0, 15.0)}, private_bounds=PrivateBoundsRequest(("median_income",))
        )
    with pytest.raises(LakeError, match="epsilon"):
        PrivateBoundsRequest(("median_income",), epsilon=-1.0)
    # 2,064 sampled positions, 24 of them dropped for a missing total_bedrooms (missing='drop'): the
    # message and the record count the positions, public, not the rows kept, which depend on the data.
    tiny = housing_spec(private_bounds=PrivateBoundsRequest(("median_income",), epsilon=0.001))
    with pytest.raises(
        LakeError, match=r"no half-decade bin of column 'median_income'.*every 10th row: 2,064 rows"
    ) as refused:
        csv_to_parquet(str(HOUSING), str(out), tiny)
    assert not out.exists() or not any(out.iterdir())
    # The message says how much epsilon the sample needs at least, and that much is not refused for it.
    needed = float(
        re.search(r"--private-epsilon \(more than ([0-9.e+-]+) for this sample", str(refused.value))[1]
    )
    assert "This attempt spent epsilon=0.001 on the sample like any release" in str(refused.value)
    assert 0.001 < needed < 1.0
    enough = housing_spec(private_bounds=PrivateBoundsRequest(("median_income",), epsilon=needed * 4))
    csv_to_parquet(str(HOUSING), str(out), enough)


def test_label_classes_id_and_intercept_round_trip_through_the_record(tmp_path):
    source = tmp_path / "rows.csv"
    source.write_text("id,x,grade\nA7,10,low\nB8,20,high\nC9,,mid\nD1,40,low\n")
    spec = ConvertSpec(
        columns=("x",), label="grade", bounds={"x": (0.0, 40.0)}, label_classes=("low", "mid", "high"),
        passthrough=("id",), intercept=True,
    )  # fmt: skip
    out = str(tmp_path / "lake")
    csv_to_parquet(str(source), out, spec)
    table = pq.read_table(out)
    assert table.column_names == ["x", "intercept", "grade", "id"]
    assert table.column("grade").to_pylist() == [0, 2, 0]  # the row with a missing x is dropped
    assert (
        table.column("id").to_pylist() == ["A7", "B8", "D1"]
        and table.column("intercept").to_pylist() == [1.0] * 3
    )
    again = ConvertSpec.from_record(read_convert_record(out))
    assert again == spec and again.output_columns() == ["x", "intercept"]
    assert again.original_units("x", table.column("x").to_numpy()).tolist() == [10.0, 20.0, 40.0]
    assert again.original_units("grade", table.column("grade").to_numpy()).tolist() == ["low", "high", "low"]
    assert again.row_norm_bound(["x", "intercept"]) == pytest.approx(2**0.5)  # [-1, 1] and the constant
    with pytest.raises(LakeError, match="label classes must be at least 2 distinct names"):
        ConvertSpec(columns=("x",), label="grade", bounds={"x": (0.0, 40.0)}, label_classes=("a", "a"))
    with pytest.raises(LakeError, match="column 'x' is both carried through untouched"):
        ConvertSpec(columns=("x",), label="grade", passthrough=("x",))


def person_csv(path: Path, people: int = 4000, seed: int = 0) -> dict[str, int]:
    """A panel CSV: each person 1–12 rows, rows shuffled (a person's rows spread over the file)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 13, people)
    ids = np.repeat([f"p{i:05d}" for i in range(people)], counts)
    order = rng.permutation(ids.size)
    income = rng.lognormal(10, 0.5, ids.size)
    age = rng.integers(18, 90, ids.size)
    lines = ["person,income,age,spend"] + [
        f"{ids[i]},{income[i]:.2f},{age[i]},{0.1 * income[i] + age[i]:.2f}" for i in order
    ]
    path.write_text("\n".join(lines) + "\n")
    return dict(zip([f"p{i:05d}" for i in range(people)], counts.tolist(), strict=True))


def test_private_bounds_per_person_leave_whole_people_out(tmp_path):
    """`convert --user`: the private bounds' sample is every 10th person by a public partition of ids (all
    their rows); the lake holds every other person whole; the record states the unit."""
    from dpstream.pipelines.conversion.sample import person_sample_mask
    from dpstream.pipelines.preprocessing.private_bounds import PrivateBoundsRequest

    rows = person_csv(tmp_path / "panel.csv")
    request = PrivateBoundsRequest(
        ("income", "age", "spend"), label="spend", epsilon=2.0, user_column="person"
    )
    spec = ConvertSpec(
        columns=("income", "age"),
        label="spend",
        passthrough=("person",),
        user_column="person",
        private_bounds=request,
        require_bounds=True,
    )
    csv_to_parquet(str(tmp_path / "panel.csv"), str(tmp_path / "lake"), spec)
    table = pq.read_table(str(tmp_path / "lake"))
    kept = table.column("person").to_pylist()
    in_lake = {person: kept.count(person) for person in set(kept)}
    assert all(in_lake[person] == rows[person] for person in in_lake)  # whole people only
    left_out = set(rows) - set(in_lake)
    import pyarrow as pa

    mask = person_sample_mask(pa.array(sorted(rows)), 10)
    assert left_out == {person for person, chosen in zip(sorted(rows), mask, strict=True) if chosen}
    assert 0.07 < len(left_out) / len(rows) < 0.13  # measured 0.099 on 4,000 people
    record = read_convert_record(str(tmp_path / "lake"))
    assert record["user_column"] == "person" and record["private_bounds"]["unit"] == "user:person"
    assert record["private_bounds"]["sample_rows"] == len(left_out)  # people, not rows
    assert "sampled people (every row of one value of 'person'" in record["private_bounds"]["guarantee"]
    with pytest.raises(LakeError, match="must be carried into the lake"):
        ConvertSpec(columns=("income",), label="spend", user_column="person")


def test_a_row_without_its_person_is_refused(tmp_path):
    from dpstream.pipelines.preprocessing.private_bounds import PrivateBoundsRequest

    person_csv(tmp_path / "panel.csv", people=50)
    text = (tmp_path / "panel.csv").read_text().splitlines()
    text[3] = "," + text[3].split(",", 1)[1]
    (tmp_path / "panel.csv").write_text("\n".join(text) + "\n")
    spec = ConvertSpec(
        columns=("income", "age"),
        label="spend",
        passthrough=("person",),
        user_column="person",
        private_bounds=PrivateBoundsRequest(("income", "age", "spend"), label="spend", user_column="person"),
        require_bounds=True,
    )
    with pytest.raises(
        LakeError, match=r"data row 2 \(line 4 of the file\) has no 'person' \(the person column\)"
    ):
        csv_to_parquet(str(tmp_path / "panel.csv"), str(tmp_path / "lake"), spec)
    assert not (tmp_path / "lake").exists() or not os.listdir(tmp_path / "lake")


def test_the_public_range_map_is_the_formula_bit_for_bit_in_pool_memory():
    """convert_rows maps each bounded column in one pass (``range_map.map_range``, a Numba loop) or, where
    that cannot run, in place in Arrow's pool (``map_range_numpy``): both give the bits of the
    expression they replaced (NaN, infinities and signed zeros included), in float64 and once narrowed."""
    import numpy as np
    import pyarrow as pa

    from dpstream.pipelines.memory import pool_empty
    from dpstream.pipelines.preprocessing import range_map
    from dpstream.pipelines.preprocessing.range_map import map_range, map_range_numpy

    assert range_map._compiled() is not None  # the loop, not the fallback compared with itself
    rng = np.random.default_rng(3)
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    for (low, high), (target_low, target_high) in (
        ((0, 10), (-1.0, 1.0)),
        ((-3.3, 7.1), (0, 1)),
        ((-20000.0, 80000.0), (-1.0, 1.0)),
        ((1e-3, 2e-3), (-1.0, 1.0)),
        ((-1, 0), (0.0, 2.5)),
        ((0, 10), (-0.0, 1.0)),  # a −0.0 input clipped at +0 keeps its sign, and so does t_lo + 0
        ((-1.0, -0.0), (-0.0, 1.0)),
    ):
        for source in (np.float32, np.float64):
            drawn = np.concatenate([rng.normal(low, abs(high) * 2 + 1, 50_000), specials, [low, high]])
            given = drawn.astype(source)  # float32 columns reach the map as they are stored, too
            values = given.astype(np.float64)
            expected = target_low + (target_high - target_low) * (np.clip(values, low, high) - low) / (
                high - low
            )
            for width, bits in ((np.float64, np.uint64), (np.float32, np.uint32)):
                wanted = expected.astype(width).view(bits)
                for mapped in (
                    map_range(values, (low, high), (target_low, target_high), width),
                    map_range_numpy(values, (low, high), (target_low, target_high), width),
                    map_range(given, (low, high), (target_low, target_high), width),
                    map_range_numpy(given, (low, high), (target_low, target_high), width),
                ):
                    assert mapped.dtype == width and np.array_equal(mapped.view(bits), wanted)
    before = pa.total_allocated_bytes()
    array = pool_empty((3, 5), np.float32)
    assert pa.total_allocated_bytes() >= before + 60  # the pool's memory, not the C allocator's
    array[...] = 2.0
    assert array.flags.writeable and array.flags.c_contiguous and array.ctypes.data % 64 == 0
    assert array.sum() == 30.0 and pool_empty(0, np.float64).shape == (0,)


def test_float32_columns_are_mapped_as_stored_with_nulls_imputed_and_infinities_refused():
    """A float32 column reaches the range map as it is stored (no float64 copy of the column
    first); the prepared values are the formula on the widened values, narrowed once, bit for bit; a null
    is imputed, and an infinity refused naming its row."""
    import numpy as np
    import pyarrow as pa

    from dpstream.pipelines.preprocessing.rows import convert_rows

    rng = np.random.default_rng(5)
    spread = rng.normal(50, 80, 10_000).astype(np.float32)
    kept = rng.normal(0, 1, 10_000).astype(np.float32)
    mask = np.zeros(10_000, dtype=bool)
    mask[[7, 4_000]] = True
    batch = pa.table(
        {
            "spread": pa.array(spread, mask=mask),
            "kept": pa.array(kept),
            "y": pa.array(rng.normal(size=10_000)),
        }
    )
    spec = ConvertSpec(
        ("spread", "kept"),
        "y",
        missing="impute",
        impute_values={"spread": 25.0},
        bounds={"spread": (0.0, 100.0)},
        scale_range=(-1.0, 1.0),
        unscaled=("kept", "y"),
        on_read=True,
    )
    out = convert_rows(batch, spec, 0, "part-0.parquet")
    widened = np.where(mask, 25.0, spread.astype(np.float64))
    expected = (-1.0 + 2.0 * (np.clip(widened, 0.0, 100.0) - 0.0) / 100.0).astype(np.float32)
    assert out.column("spread").type == pa.float32() == out.column("kept").type
    assert np.array_equal(out.column("spread").to_numpy().view(np.uint32), expected.view(np.uint32))
    assert np.array_equal(out.column("kept").to_numpy(), kept) and out.num_rows == 10_000
    # Beside a float64 feature the features are float64: an imputed 0.1 is the float64 0.1, exactly, as
    # kept and as mapped (not 0.1 rounded to float32 first).
    mixed = batch.set_column(1, "kept", pa.array(kept.astype(np.float64)))
    for bounds, expected_value in (({}, 0.1), ({"spread": (0.0, 100.0)}, -1.0 + 2.0 * 0.1 / 100.0)):
        imputing = ConvertSpec(
            ("spread", "kept"),
            "y",
            missing="impute",
            impute_values={"spread": 0.1},
            bounds=bounds,
            scale_range=(-1.0, 1.0),
            unscaled=("spread", "kept", "y") if not bounds else ("kept", "y"),
            on_read=True,
        )
        prepared = convert_rows(mixed, imputing, 0, "part-0.parquet").column("spread").to_numpy()
        assert prepared.dtype == np.float64 and prepared[7] == prepared[4_000] == expected_value
    spread[123] = np.inf
    infinite = batch.set_column(0, "spread", pa.array(spread, mask=mask))
    with pytest.raises(LakeError, match="part-0.parquet: row 123 of column 'spread' is inf"):
        convert_rows(infinite, spec, 0, "part-0.parquet")


@pytest.mark.parametrize("source", ["float32", "float64"])
def test_rows_mapped_straight_into_the_matrix_are_convert_rows_then_the_fill_bit_for_bit(source):
    """Scoring prepares a batch straight into the model's matrix (``map_rows_into``: range maps,
    columns kept as they are, an intercept) exactly as ``convert_rows`` then ``X[:, j] = column`` would; a
    NaN, an infinity or mixed types leave it to that usual path (False)."""
    import numpy as np
    import pyarrow as pa

    from dpstream.pipelines.preprocessing.range_map import map_rows_into
    from dpstream.pipelines.preprocessing.rows import convert_rows

    rng = np.random.default_rng(11)
    rows = 5_000
    values = {
        "wide": np.concatenate([rng.normal(3e4, 5e4, rows - 4), [-2e4, 8e4, -0.0, 0.0]]),
        "small": rng.normal(1.5e-3, 1e-3, rows),
        "kept": rng.normal(0, 1, rows),
    }
    batch = pa.table({name: pa.array(column.astype(source)) for name, column in values.items()})
    spec = ConvertSpec(
        ("wide", "small", "kept"),
        "y",
        bounds={"wide": (-20000.0, 80000.0), "small": (1e-3, 2e-3)},
        scale_range=(-1.0, 1.0),
        unscaled=("kept",),
        missing="impute",
        intercept=True,
        on_read=True,
    )
    prepared = convert_rows(batch, spec, 0, "part-0.parquet", with_label=False)
    expected = np.empty((rows, 4))
    for j, name in enumerate(prepared.column_names):
        expected[:, j] = prepared.column(name).to_numpy()
    columns = [batch.column(name).to_numpy() for name in spec.columns]
    bounds = [spec.bounds.get(name) for name in spec.columns]
    X = np.full((rows, 4), np.nan)
    assert map_rows_into(columns, bounds, spec.scale_range, X)
    assert np.array_equal(X.view(np.uint64), expected.view(np.uint64))
    for spoiled in (np.nan, np.inf):
        broken = [column.copy() for column in columns]
        broken[1][17] = spoiled
        assert not map_rows_into(broken, bounds, spec.scale_range, X)
    mixed = [columns[0].astype(np.float64 if source == "float32" else np.float32), *columns[1:]]
    assert not map_rows_into(mixed, bounds, spec.scale_range, X)


def test_an_unknown_category_met_while_scoring_says_the_model_must_be_trained_again():
    """Scoring a row whose category the model never saw must not say "add it to
    preprocess.categories.race", which cannot help a model already trained."""
    import pyarrow as pa

    from dpstream.pipelines.preprocessing.rows import convert_rows

    spec = ConvertSpec(
        ("age",),
        "wage",
        missing="impute",
        categorical={"race": ("1", "2", "3")},
        bounds={"age": (14.0, 46.0)},
        scale_range=(-1.0, 1.0),
        on_read=True,
    )
    rows = pa.table({"age": [30.0, 31.0], "race": ["1", "4"], "wage": [1.0, 2.0]})
    with pytest.raises(LakeError, match="add it to preprocess.categories.race"):
        convert_rows(rows, spec, 0, "part-0.parquet")  # preparing a lake: the config's list can grow
    with pytest.raises(
        LakeError,
        match=r"row 1 of column 'race' has category '4' not in the public list \['1', '2', '3'\]; the model "
        r"knows only these categories: score rows whose value is among them, or train again",
    ):
        convert_rows(rows, spec, 0, "part-0.parquet", with_label=False)
