"""The empirical privacy audit: honest mechanisms stay below their claim, a broken one is caught."""

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpstream.audit import (
    NoiseScaledDown,
    _clopper_pearson,
    audit_algorithm,
    audited_algorithms,
    epsilon_lower_bound,
)
from dpstream.privacy import NeighbouringRelation

ROOT = Path(__file__).resolve().parents[1]
CLAIMED = 2.0


def test_clopper_pearson_closed_forms():
    # Zero successes: the upper end solves (1 − p)^n = alpha/2; all successes mirror it.
    low, high = _clopper_pearson(np.array([0, 100]), 100, 0.05)
    assert low[0] == 0.0 and high[0] == pytest.approx(1 - 0.025 ** (1 / 100), rel=1e-9)
    assert high[1] == 1.0 and low[1] == pytest.approx(0.025 ** (1 / 100), rel=1e-9)


def test_perfect_separation_bound_is_limited_by_the_trials():
    """With n trials per side and perfect separation the bound is ln((1 − a)/a), a = 1 − (α/4)^(1/n)."""
    with_canary, without = np.ones(200), np.zeros(200)
    bound, tpr, fpr = epsilon_lower_bound(with_canary, without, 0.5, delta=0.0, confidence=0.95)
    a = 1 - 0.0125 ** (1 / 200)
    assert (tpr, fpr) == (1.0, 0.0) and bound == pytest.approx(math.log((1 - a) / a), rel=1e-9)


@pytest.mark.parametrize("name", ["dpsgd", "dpsgd-lambda", "dpsgd-nu", "ambssgd", "srgd", "ssp"])
def test_honest_mechanisms_stay_below_the_claim_and_broken_ones_are_caught(name):
    algorithm = audited_algorithms(CLAIMED, 1e-5)[name]
    honest = audit_algorithm(algorithm, trials=1500, seed=1)
    assert honest.passed and honest.epsilon_lower_bound < CLAIMED
    broken = audit_algorithm(NoiseScaledDown(algorithm, 10.0), trials=1500, seed=1)
    assert broken.claimed_epsilon == CLAIMED and not broken.passed
    assert broken.epsilon_lower_bound > CLAIMED


def test_zero_out_neighbour_is_a_zero_row():
    from dpstream.audit import canary_datasets

    X, y_in, X_out, y_out = canary_datasets(50, 3, 7, NeighbouringRelation.ZERO_OUT)
    assert np.all(X_out[7] == 0) and y_out[7] == 0 and X[7, -1] == 10.0 and y_in[7] == -1e6
    assert np.all(X[np.arange(50) != 7, -1] == 0)  # no background row moves the audited coordinate
    _, _, X_out, y_out = canary_datasets(50, 3, 7, NeighbouringRelation.REPLACE_ONE)
    assert X_out[7, -1] == 10.0 and y_out[7] == 1e6  # the mirror canary
    result = audit_algorithm(audited_algorithms(CLAIMED, 1e-5, "zero-out")["dpsgd"], trials=600)
    assert result.relation == "zero-out" and result.passed


def test_audit_command():
    done = subprocess.run(
        [sys.executable, "-m", "dpstream.flows.cli.main", "audit", "--algorithm", "dpsgd", "--trials", "200"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "dpsgd" in done.stdout and "consistent" in done.stdout


def test_audit_command_names_the_registered_configurations_for_an_unknown_one():
    done = subprocess.run(
        [sys.executable, "-m", "dpstream.flows.cli.main", "audit", "--algorithm", "dp-sgd"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "'dp-sgd' is not an audited configuration" in done.stderr
    for name in ("all", "dpsgd", "dpsgd-lambda", "dpsgd-nu", "ambssgd", "srgd", "ssp"):
        assert name in done.stderr
