"""The one module of parameter checks: each error names the parameter, the range and the value."""

import math

import numpy as np
import pytest

from dpstream.validation import check_budget, check_positive, check_probability


def test_positive_numbers():
    assert check_positive("clip_norm", 2) == 2.0 and isinstance(
        check_positive("clip_norm", np.float32(0.5)), float
    )
    assert check_positive("sensitivity", 0.0, allow_zero=True) == 0.0
    assert check_positive("projection_radius", None, optional=True) is None
    for bad in (0.0, -1.0, math.inf, math.nan, "1.0x", None, True):
        with pytest.raises(ValueError, match=r"^clip_norm must be a finite number > 0, got "):
            check_positive("clip_norm", bad)
    with pytest.raises(ValueError, match=r"^mu must be a finite number >= 0, got -0.1$"):
        check_positive("mu", -0.1, allow_zero=True)
    with pytest.raises(ValueError, match=r"^radius must be a finite number > 0 or None, got 'x'$"):
        check_positive("radius", "x", optional=True)


def test_positive_integers():
    assert check_positive("batch_size", np.int64(64), integer=True) == 64 and isinstance(
        check_positive("dim", 3.0, integer=True), int
    )
    for bad in (0, -3, 2.5, math.inf, True):
        with pytest.raises(ValueError, match=r"^dim must be a positive integer, got "):
            check_positive("dim", bad, integer=True)


def test_probabilities_and_budgets():
    assert check_probability("delta", 1e-6) == 1e-6
    for bad in (0.0, 1.0, -1e-9, math.nan, "small"):
        with pytest.raises(ValueError, match=r"^delta must lie in the open interval \(0, 1\), got "):
            check_probability("delta", bad)
    assert check_budget(1, 1e-6) == (1.0, 1e-6)
    with pytest.raises(ValueError, match=r"^epsilon must be a finite number > 0, got 0$"):
        check_budget(0, 1e-6)


def test_library_objects_use_it():
    """The algorithms, noise processes, events and GDP conversions report bad values the same way."""
    from dpstream.algorithms import DPSGD
    from dpstream.noise import make_noise_process
    from dpstream.privacy import epsilon_for_delta

    with pytest.raises(ValueError, match=r"^batch_size must be a positive integer, got 0$"):
        DPSGD(1.0, 1e-6, clip_norm=1.0, learning_rate=0.1, batch_size=0)
    with pytest.raises(ValueError, match=r"^dim must be a positive integer, got 0$"):
        make_noise_process("independent").init(0)
    with pytest.raises(ValueError, match=r"^mu must be a finite number >= 0, got -1.0$"):
        epsilon_for_delta(1e-6, -1.0)
