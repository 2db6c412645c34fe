"""Each algorithm states its plan as a frozen, typed class of its own: the noise scales the privacy
report is computed from are named fields, not entries of a mutable dict."""

import dataclasses
import re
from pathlib import Path

import pytest

from dpstream.algorithms import Plan
from dpstream.audit import NoiseScaledDown, audited_algorithms
from dpstream.noise import NoiseProcess

ALGORITHMS = audited_algorithms(1.0, 1e-6)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_plans_are_frozen_typed_subclasses_naming_their_noise(name):
    algorithm = ALGORITHMS[name]
    plan = algorithm.plan(2_000, 4)
    assert isinstance(plan, Plan) and type(plan) is not Plan and not hasattr(plan, "details")
    assert plan.num_params == 4 and plan.NOISE_FIELDS
    field_names = {field.name for field in dataclasses.fields(plan)}
    assert set(plan.NOISE_FIELDS) <= field_names
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(plan, plan.NOISE_FIELDS[0], None)
    # The report is computed from the plan's fields: scaling them down raises the ε it states.
    weaker = NoiseScaledDown(algorithm, factor=2.0).plan(2_000, 4)
    for field in plan.NOISE_FIELDS:
        before, after = getattr(plan, field), getattr(weaker, field)
        before, after = getattr(before, "noise_std", before), getattr(after, "noise_std", after)
        assert after == pytest.approx(before / 2.0)
    with pytest.raises(ValueError, match="more than the requested epsilon"):
        algorithm.report(weaker)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_plans_hold_their_noise_processes_with_one_stream_each(name):
    """Every draw an algorithm adds comes from a noise process that its plan holds as a field; two
    mechanisms of one step sharing a stream would add the same Gaussian twice (correlated noise the
    accountant does not know about)."""
    plan = ALGORITHMS[name].plan(2_000, 4)
    processes = [
        getattr(plan, field.name)
        for field in dataclasses.fields(plan)
        if isinstance(getattr(plan, field.name), NoiseProcess)
    ]
    assert processes, f"{type(plan).__name__} holds no noise process"
    streams = [process.stream for process in processes]
    assert len(set(streams)) == len(streams)


def test_algorithms_draw_noise_only_through_their_processes():
    """No algorithm module calls the raw generator: a draw outside a process would bypass the plan."""
    import dpstream.algorithms as package

    folder = Path(package.__file__).parent
    raw_draw = re.compile(r"(?<!calibrate_)gaussian\(")  # dpstream.noise's generator (any spelling)
    for module in folder.glob("*.py"):
        assert not raw_draw.search(module.read_text()), f"{module.name} draws noise outside a process"
