"""Pipeline configs: typed, validated, unknown keys and bad values rejected with their key path."""

import pytest

from dpstream.flows.assembly.loading import load_config, load_inputs
from dpstream.flows.config.file import ConfigError

GOOD = """
[lake]
url = "/data/raw"
features = ["x0", "x1"]
label = "y"
shuffled_url = "/data/shuffled"

[algorithm]
name = "dpsgd"
noise = "nu"
nu = 0.01
clip_norm = 2.0
batch_size = 1024

[budget]
epsilon = 1.0
delta = 1e-6
lifetime_epsilon = 8.0
ledger_url = "/data/ledger"

[schedule]
cron = "0 2 * * *"
"""


def write(tmp_path, text):
    path = tmp_path / "pipeline.toml"
    path.write_text(text)
    return path


def test_good_config(tmp_path):
    config = load_config(write(tmp_path, GOOD))
    assert config.algorithm.name == "dpsgd" and config.algorithm.nu == 0.01
    assert config.model.kind == "linear" and config.cluster.n_workers == 2 and config.checkpoint is None
    assert config.budget.relation == "replace-one"


@pytest.mark.parametrize(
    "edit, match",
    [
        (
            lambda t: t.replace("clip_norm = 2.0", "clip_norm = 0"),
            r"algorithm\.clip_norm: Input should be greater than 0",
        ),
        (
            lambda t: t.replace("nu = 0.01", "nu = 1.5"),
            r"algorithm\.nu: Input should be less than or equal to 1",
        ),
        (
            lambda t: t.replace("batch_size = 1024", "batch_size = 1024\nbatchsize = 3"),
            r"algorithm\.batchsize: unknown key",
        ),
        (
            lambda t: t.replace("epsilon = 1.0", "epsilon = -1.0"),
            r"budget\.epsilon: Input should be greater than 0",
        ),
        (lambda t: t.replace("delta = 1e-6", "delta = 1.0"), r"budget\.delta: must be below 0\.5"),
        (
            lambda t: t.replace("delta = 1e-6", "delta = 0.5"),
            r"budget\.delta: must be below 0\.5: δ is the probability",
        ),
        (lambda t: t.replace("epsilon = 1.0", "epsilon = inf"), r"budget\.epsilon: must be a finite number"),
        (lambda t: t.replace("epsilon = 1.0", "epsilon = nan"), r"budget\.epsilon: must be a finite number"),
        (
            lambda t: t.replace("lifetime_epsilon = 8.0", "lifetime_epsilon = inf"),
            r"budget\.lifetime_epsilon: must be a finite",
        ),
        (
            lambda t: t.replace('["x0", "x1"]', '["x0", "y"]'),
            r"lake\.features: the label 'y' is also listed as a feature",
        ),
        (
            lambda t: t.replace('["x0", "x1"]', '["x0", "x1", "x0"]'),
            r"lake\.features: .*'x0' listed more than once",
        ),
        (
            lambda t: t.replace('"/data/shuffled"', '"/data/raw"'),
            r"lake\.shuffled_url /data/raw is the source lake",
        ),
        (lambda t: t.replace('"/data/shuffled"', '"/data/raw/shuffled"'), r"lies inside the source lake"),
        (lambda t: t.replace('"/data/shuffled"', '"/data"'), r"contains the source lake"),
        (lambda t: t.replace('"/data/shuffled"', '"."'), r"\(the pipeline config's folder\)"),
        (lambda t: t.replace("epsilon = 1.0", "epsilon = 9.0"), r"exceeds lifetime_epsilon=8.0"),
        (
            lambda t: t.replace('name = "dpsgd"', 'name = "adam"'),
            r"algorithm\.name: .*algorithm must be one of 'auto', 'ambssgd', 'dpsgd', 'srgd', 'ssp'",
        ),
        (lambda t: t.replace('label = "y"\n', ""), r"lake\.label: required key is missing"),
        (lambda t: t + "\n[extra]\nkey = 1\n", r"extra: unknown key"),
        (lambda t: t.replace("[budget]", "[budget"), r"not valid TOML"),
        (
            lambda t: t.replace('"0 2 * * *"', '"0 2 * *"'),
            r"schedule\.cron: a cron string has 5 fields",
        ),
        (
            lambda t: t.replace('name = "dpsgd"', 'name = "srgd"') + '\n[model]\nkind = "kan"\n',
            r"model.kind = 'kan' trains with algorithm.name = 'dpsgd'",
        ),
        (
            lambda t: t + '\n[model]\nkind = "kan"\nnum_hidden = 0\n',
            r"model\.num_hidden: Input should be greater than 0",
        ),
        (
            lambda t: t + '\n[model]\nbackend = "tpu"\n',
            r"model\.backend: Input should be 'numpy', 'cupy' or 'auto'",
        ),
        (
            lambda t: t + '\n[model]\nkind = "forest"\n',
            r"model\.kind: unknown model kind 'forest'; expected one of .*'linear'.*'logistic'",
        ),
        (
            lambda t: t + '\n[model]\nkind = "linear"\nclasses = ["a", "b"]\n',
            r"model.kind = 'linear' is a regression; model.classes is for a classifier",
        ),
        (
            lambda t: t + '\n[model]\nkind = "kan"\nclasses = ["a", "b", "c"]\n',
            r"model.kind = 'kan' takes at most 2 classes, got 3; use kind = 'logistic'",
        ),
        (
            lambda t: t + '\n[model]\nkind = "logistic"\nclasses = ["a", "a"]\n',
            r"model\.classes: classes must list at least 2 distinct class names",
        ),
        (
            lambda t: t + '\n[privacy]\nunit = "user"\n',
            r"privacy: unit = 'user' needs user_column",
        ),
        (
            lambda t: t + '\n[privacy]\nuser_column = "customer"\n',
            r"privacy: user_column and max_rows_per_user apply to unit = 'user'",
        ),
        (
            lambda t: t + '\n[privacy]\nunit = "user"\nuser_column = "x1"\n',
            r"privacy.user_column 'x1' is also lake.features: a person's id is never trained on",
        ),
        (
            lambda t: t + '\n[privacy]\nunit = "user"\nuser_column = "c"\nmax_rows_per_user = 0\n',
            r"privacy\.max_rows_per_user.*give a whole number of rows ≥ 1, or 'auto'",
        ),
        (
            lambda t: t + '\n[privacy]\nunit = "person"\n',
            r"privacy\.unit: Input should be 'row' or 'user'",
        ),
    ],
)
def test_bad_configs_name_the_key(tmp_path, edit, match):
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, edit(GOOD)))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "nope.toml")


def test_relative_locations_are_relative_to_the_config(tmp_path):
    text = GOOD.replace('"/data/raw"', '"work/raw"').replace('"/data/ledger"', '"s3://bucket/ledger"')
    (tmp_path / "pipelines").mkdir()
    config = load_config(write(tmp_path / "pipelines", text))
    assert config.lake.url == str(tmp_path / "pipelines" / "work" / "raw")
    assert config.lake.shuffled_url == "/data/shuffled"  # absolute: unchanged
    assert config.budget.ledger_url == "s3://bucket/ledger"  # a URL: unchanged


def test_model_sections_build_their_models(tmp_path):
    from dpstream.models import KANModel, LogisticRegressionModel, MultinomialLogisticModel

    kan = load_config(
        write(
            tmp_path,
            GOOD
            + '\n[model]\nkind = "kan"\nnum_hidden = 8\nfeature_low = [-1.0, -2.0]\nfeature_high = 3.0\n',
        )
    )
    model = kan.model.build()
    assert model == KANModel(num_hidden=8, feature_low=(-1.0, -2.0), feature_high=3.0)
    logistic = load_config(write(tmp_path, GOOD + '\n[model]\nkind = "logistic"\nbackend = "auto"\n'))
    assert logistic.model.build() == LogisticRegressionModel(backend="auto")
    assert logistic.label_contract.allowed() == (frozenset({0.0, 1.0}), frozenset({-1.0, 1.0}))
    three = load_config(
        write(tmp_path, GOOD + '\n[model]\nkind = "logistic"\nclasses = ["lo", "mid", "hi"]\n')
    )
    assert three.model.build() == MultinomialLogisticModel(num_classes=3)
    assert three.label_contract.allowed() == (frozenset({0.0, 1.0, 2.0}),)
    assert "3 classes (lo, mid, hi) coded as their positions 0..2" == three.label_contract.describe()


def test_delta_warning_names_one_over_n():
    from dpstream.flows.config.pipeline import delta_warning

    assert delta_warning(1e-6, 100_000) is None
    warning = delta_warning(1e-3, 20_000)
    assert "budget.delta = 0.001" in warning and "1/N = 5e-05" in warning and "1e-06" in warning


def test_run_locations_keep_checkpoints_private(tmp_path):
    from dpstream.flows.assembly.locations import run_locations

    config = load_config(write(tmp_path, GOOD))
    locations = run_locations(config, tmp_path / "pipeline.toml", "r1")
    assert locations.output == str(tmp_path / "runs" / "r1")
    assert locations.operator == str(tmp_path / "operator" / "r1")  # the non-private metrics: never in runs/
    assert locations.checkpoints == "/data/ledger/_checkpoints"  # beside the ledger, never under runs/
    with pytest.raises(
        ConfigError, match=r"--output \(the publish folder\) /data/raw/out lies inside the source lake"
    ):
        run_locations(config, tmp_path / "pipeline.toml", "r1", output="/data/raw/out")
    inside = GOOD + '\n[checkpoint]\nurl = "/pub/ckpt"\n'
    with pytest.raises(ConfigError, match=r"--output \(the publish folder\) /pub contains the checkpoints"):
        run_locations(load_config(write(tmp_path, inside)), tmp_path / "pipeline.toml", "r1", output="/pub")


@pytest.mark.parametrize(
    "output, operator, match",
    [
        (
            "/data/ledger/_checkpoints/r1",
            None,
            r"--output \(the publish folder\) .* lies inside the privacy ledger",
        ),
        ("/data/ledger/lake-abc/runs", None, r"lies inside the privacy ledger \(budget.ledger_url\)"),
        ("/data/shuffled/_g-1", None, r"lies inside the shuffled lake"),
        ("/data", None, r"contains the source lake"),
        (None, "/data/raw", r"--operator-output \(the operator folder\) /data/raw is the source lake"),
        ("/pub", "/pub/operator", r"lies inside the publish folder \(--output\)"),
    ],
)
def test_every_write_location_follows_one_rule(tmp_path, output, operator, match):
    from dpstream.flows.assembly.locations import run_locations

    config = load_config(write(tmp_path, GOOD))
    with pytest.raises(ConfigError, match=match):
        run_locations(config, tmp_path / "pipeline.toml", "r1", output=output, operator=operator)


def test_a_publish_folder_inside_a_data_location_is_refused(tmp_path):
    from dpstream.flows.assembly.locations import run_locations

    lake = tmp_path / "other-lake"
    lake.mkdir()
    (lake / "part-0.parquet").write_bytes(b"a lake's file")
    ledger = tmp_path / "old-ledger"
    ledger.mkdir()
    (ledger / "_dpstream_ledger.json").write_text("{}")
    config = load_config(write(tmp_path, GOOD))
    for output, what in ((lake / "out", "Parquet files"), (ledger / "x" / "y", "a privacy ledger")):
        with pytest.raises(ConfigError, match=f"lies inside .*, which holds {what}"):
            run_locations(config, tmp_path / "pipeline.toml", "r1", output=str(output))
        assert not output.exists()


@pytest.mark.parametrize(
    "edit, match",
    [
        (
            lambda t: t.replace('ledger_url = "/data/ledger"', 'ledger_url = "/data/raw/ledger"'),
            r"budget.ledger_url /data/raw/ledger lies inside the source lake",
        ),
        (
            lambda t: t.replace('ledger_url = "/data/ledger"', 'ledger_url = "/data/shuffled"'),
            r"lake.shuffled_url /data/shuffled is the privacy ledger",
        ),
        (
            lambda t: t + '\n[checkpoint]\nurl = "/data/raw/ck"\n',
            r"checkpoint.url /data/raw/ck lies inside the source lake",
        ),
        (
            lambda t: t.replace('shuffled_url = "/data/shuffled"', 'shuffled_url = "/data/ledger/s"'),
            r"lake.shuffled_url /data/ledger/s lies inside the privacy ledger",
        ),
    ],
)
def test_the_configs_own_locations_are_refused_at_load(tmp_path, edit, match):
    """validate, shuffle and train all load the config: none of them accepts what another refuses."""
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, edit(GOOD)))


@pytest.mark.parametrize(
    "edit, match",
    [
        (
            lambda t: t.replace("epsilon = 1.0", "epsilon = true"),
            r"budget\.epsilon: Input should be a valid number .*got True of type bool",
        ),
        (
            lambda t: t.replace("batch_size = 1024", 'batch_size = "1024"'),
            r"algorithm\.batch_size: Input should be a valid integer",
        ),
        (
            lambda t: t.replace("lifetime_epsilon = 8.0", "lifetime_epsilon = 1e300"),
            r"budget\.lifetime_epsilon: must be at most 100",
        ),
        (
            lambda t: t.replace("epsilon = 1.0\n", "epsilon = 1e300\n", 1),
            r"budget\.epsilon: must be at most 100",
        ),
        (
            lambda t: t.replace("clip_norm = 2.0", "clip_norm = false"),
            r"algorithm\.clip_norm: Input should be a valid number",
        ),
    ],
)
def test_types_are_strict_and_absurd_budgets_are_refused(tmp_path, edit, match):
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, edit(GOOD)))
    assert load_config(write(tmp_path, GOOD.replace("epsilon = 1.0", "epsilon = 1"))).budget.epsilon == 1.0


def test_training_split_exists_for_every_lake_that_validates(tmp_path):
    config = load_inputs(write(tmp_path, GOOD))  # GOOD sets no rows_per_file: the automatic layout
    assert config.rows_per_file(1000) == 200 and config.training_split(1000) == (5, 800, 200)
    assert config.rows_per_file(10**7) == 250_000 and config.training_split(10**7) == (
        40,
        10**7 - 250_000,
        250_000,
    )
    assert config.training_split(2) == (2, 1, 1)
    with pytest.raises(ConfigError, match="a lake needs at least 2 rows"):
        config.training_split(1)
    explicit = load_inputs(write(tmp_path, GOOD.replace('label = "y"', 'label = "y"\nrows_per_file = 1000')))
    with pytest.raises(
        ConfigError,
        match=r"lake.rows_per_file: 1,000 rows at 1,000 rows per file make one shuffled file.*at most 500",
    ):
        explicit.training_split(1000)


def test_the_whole_checkpoint_section_reaches_the_policy(tmp_path):
    from dpstream.checkpoint import DEFAULT_EVERY_STEPS
    from dpstream.flows.assembly.planning import checkpoint_policy

    timed = load_config(
        write(tmp_path, GOOD + '\n[checkpoint]\nurl = "/data/ckpt"\nevery_steps = 7\nevery_seconds = 30.0\n')
    )
    policy = checkpoint_policy(timed, "/data/ckpt")
    assert (policy.every_steps, policy.every_seconds) == (7, 30.0)
    plain = checkpoint_policy(load_config(write(tmp_path, GOOD)), "/data/ckpt")
    assert (plain.every_steps, plain.every_seconds) == (DEFAULT_EVERY_STEPS, None)
    assert (
        load_config(write(tmp_path, GOOD + '\n[checkpoint]\nurl = "/data/ckpt"\n')).checkpoint.every_steps
        == DEFAULT_EVERY_STEPS
    )


def test_the_privacy_unit_section(tmp_path):
    inputs = load_inputs(write(tmp_path, GOOD + '\n[privacy]\nunit = "user"\nuser_column = "customer"\n'))
    config = inputs.config
    assert config.is_user_level and config.privacy.max_rows_per_user == "auto"
    assert (
        inputs.bounded_unit(8)
        .describe()
        .startswith("one user: every row of one value of 'customer' (at most 8")
    )
    assert inputs.unit.ledger_unit == "user:customer"
    assert inputs.lake.user_column == "customer" and inputs.users.is_auto
    rows = load_inputs(write(tmp_path, GOOD))
    assert rows.unit.ledger_unit == "row" and rows.users is None


def test_the_storage_outage_window_reaches_the_checkpoints_and_the_ledger(tmp_path):
    from dpstream.flows.assembly.planning import checkpoint_policy, source_ledger
    from dpstream.outages import DEFAULT_OUTAGE_SECONDS

    ledger = tmp_path / "ledger"
    text = GOOD.replace('"/data/ledger"', f'"{ledger}"')
    assert load_config(write(tmp_path, text)).storage.outage_seconds == DEFAULT_OUTAGE_SECONDS == 600
    inputs = load_inputs(write(tmp_path, text + "\n[storage]\noutage_seconds = 42\n"))
    assert checkpoint_policy(inputs.config, str(tmp_path / "ckpt")).outage.window_seconds == 42
    assert source_ledger(inputs, "lake-1", ("md5:1",)).outage.window_seconds == 42
    with pytest.raises(ConfigError, match="storage.outage_seconds"):
        load_config(write(tmp_path, text + "\n[storage]\noutage_seconds = -1\n"))
