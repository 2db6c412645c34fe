"""Noise processes: exact structure, empirical covariance, sensitivities, replay and memory."""

import math

import numpy as np
import pytest

from dpstream.noise import (
    IndependentNoise,
    LambdaCorrelatedNoise,
    NoiseKey,
    ToeplitzNoise,
    TreeNoise,
    encoder_matrix,
    gaussian,
    inverse_coefficients,
    make_noise_process,
    max_column_norm,
    nu_coefficients,
    nu_gamma_infinity,
)
from dpstream.noise.toeplitz import nu_inverse_coefficients

PROCESSES = [
    IndependentNoise(),
    LambdaCorrelatedNoise(0.0),
    LambdaCorrelatedNoise(0.6),
    ToeplitzNoise(nu=0.1),
    ToeplitzNoise(nu=0.02, taps=5),
    ToeplitzNoise(nu=0.1, history="replay"),
    ToeplitzNoise(nu=0.3, taps=3, history="replay"),
    ToeplitzNoise(coefficients=(1.0, -0.5, 0.1)),
    TreeNoise(),
]


def run(process, key, dim, steps):
    state, out = process.init(dim), []
    for _ in range(steps):
        noise, state = process.next(key, state)
        out.append(noise)
    return np.stack(out), state


@pytest.mark.parametrize("process", PROCESSES, ids=lambda p: p.describe())
def test_output_is_decoder_times_keyed_draws(process):
    key, steps, dim = NoiseKey.generate(), 23, 4
    out, _ = run(process, key, dim, steps)
    draws = np.stack([gaussian(key, t, process.stream, dim) for t in range(steps)])
    np.testing.assert_allclose(out, process.noise_matrix(steps) @ draws, rtol=0, atol=1e-12)


@pytest.mark.parametrize("process", PROCESSES, ids=lambda p: p.describe())
def test_empirical_covariance_matches_decoder(process):
    """Cov(ξ_t, ξ_s) = (M Mᵀ)[t, s]: estimated over 40,000 independent coordinates."""
    key, steps, dim = NoiseKey.from_secret(bytes(range(32))), 8, 40_000
    out, _ = run(process, key, dim, steps)
    empirical = out @ out.T / dim
    decoder = process.noise_matrix(steps)
    expected = decoder @ decoder.T
    # Var of a sample covariance entry of Gaussians: (Σ_tt Σ_ss + Σ_ts²)/n; allow 5 standard errors.
    diag = np.diag(expected)
    tolerance = 5 * np.sqrt((np.outer(diag, diag) + expected**2) / dim)
    assert np.all(np.abs(empirical - expected) <= tolerance)


@pytest.mark.parametrize("process", PROCESSES, ids=lambda p: p.describe())
@pytest.mark.parametrize("steps", [1, 2, 7, 16, 33])
def test_sensitivity_is_largest_encoder_column(process, steps):
    assert process.sensitivity(steps) == pytest.approx(
        max_column_norm(encoder_matrix(process, steps)), rel=1e-10
    )


@pytest.mark.parametrize("process", PROCESSES, ids=lambda p: p.describe())
def test_resume_from_any_step_replays_bit_for_bit(process):
    key, dim = NoiseKey.generate(), 5
    full, final = run(process, key, dim, 21)
    for step in (0, 1, 6, 8, 13, 20):
        state = process.state_at(key, dim, step)
        assert state.step == step
        tail = []
        for _ in range(step, 21):
            noise, state = process.next(key, state)
            tail.append(noise)
        assert np.stack(tail).tobytes() == full[step:].tobytes()


def test_lambda_zero_and_nu_one_are_dp_sgd_exactly():
    key = NoiseKey.generate()
    sgd, _ = run(IndependentNoise(), key, 6, 12)
    for process in (
        LambdaCorrelatedNoise(0.0),
        ToeplitzNoise(nu=1.0),
        ToeplitzNoise(nu=1.0, history="replay"),
    ):
        other, _ = run(process, key, 6, 12)
        assert other.tobytes() == sgd.tobytes()
        assert process.sensitivity(1000) == 1.0


def test_lambda_sensitivity_closed_form():
    # docs/design.md, note D3: ‖C[:, 0]‖² = (1 − λ^{2T})/(1 − λ²); 1.1547 at λ = 0.5, 2.150 at λ = 0.9
    # (T = 10).
    assert LambdaCorrelatedNoise(0.5).sensitivity(10) == pytest.approx(1.1547, abs=1e-4)
    assert LambdaCorrelatedNoise(0.9).sensitivity(10) == pytest.approx(2.150, abs=1e-3)
    assert LambdaCorrelatedNoise(0.9).sensitivity(10**9) == pytest.approx(1 / math.sqrt(1 - 0.81))


def test_nu_coefficients_table():
    # Choquette-Choo et al. (arXiv:2310.06771) Eq. 7 and its reciprocal series (docs/design.md, note B1),
    # at ν = 0.1.
    np.testing.assert_allclose(
        nu_coefficients(0.1, 7),
        [1, -0.45, -0.10125, -0.0455625, -0.02562891, -0.01614621, -0.01089869],
        atol=5e-9,
    )
    np.testing.assert_allclose(
        nu_inverse_coefficients(0.1, 6), [1, 0.45, 0.30375, 0.2278125, 0.17940234, 0.1453159], atol=5e-9
    )
    # ν → 0: the (−1)^t C(1/2, t) of Fichtenberger et al.
    np.testing.assert_allclose(
        nu_coefficients(0.0, 7), [1, -1 / 2, -1 / 8, -1 / 16, -5 / 128, -7 / 256, -21 / 1024]
    )
    # Sums: Σ β = sqrt(ν) and the β_t < 0 for t ≥ 1.
    beta = nu_coefficients(0.3, 4000)
    assert beta.sum() == pytest.approx(math.sqrt(0.3), abs=1e-12)
    assert np.all(beta[1:] < 0)


def test_inverse_coefficients_match_dense_inverse():
    for beta in (nu_coefficients(0.05, 30), np.array([2.0, -0.7, 0.3, 0.1])):
        n = 30
        padded = np.concatenate([beta, np.zeros(max(0, n - len(beta)))])[:n]
        index = np.subtract.outer(np.arange(n), np.arange(n))
        dense = np.where(index >= 0, padded[np.clip(index, 0, None)], 0.0)
        np.testing.assert_allclose(inverse_coefficients(beta, n), np.linalg.inv(dense)[:, 0], atol=1e-13)
    np.testing.assert_allclose(
        inverse_coefficients(nu_coefficients(0.2, 50), 50), nu_inverse_coefficients(0.2, 50), atol=1e-14
    )


@pytest.mark.parametrize(
    "nu, gamma_squared",
    [
        (0.5, 1.073182),
        (0.1, 1.451843),
        (1e-2, 2.136878),
        (1e-3, 2.861986),
        (1e-4, 3.593813),
        (1.5625e-4, 3.451836),
        (1e-5, 4.326605),
    ],
)
def test_gamma_infinity_table(nu, gamma_squared):
    assert nu_gamma_infinity(nu) ** 2 == pytest.approx(gamma_squared, abs=1e-6)


@pytest.mark.parametrize(
    "nu, steps, gamma_squared",
    [
        (1e-2, 10, 1.7406),
        (1e-2, 100, 2.1213),
        (1e-2, 1000, 2.1369),
        (1e-3, 10, 1.7861),
        (1e-3, 100, 2.4721),
        (1e-3, 1000, 2.8464),
        (1e-3, 10_000, 2.8620),
        (1.5625e-4, 10_000, 3.4483),
        (1.5625e-4, 100_000, 3.4518),
    ],
)
def test_gamma_finite_horizon_table(nu, steps, gamma_squared):
    assert ToeplitzNoise(nu=nu).sensitivity(steps) ** 2 == pytest.approx(gamma_squared, abs=1e-4)


def test_gamma_small_horizon_and_anytime_limit():
    for nu in (0.0 + 1e-12, 0.4):
        gamma2 = [ToeplitzNoise(nu=nu).sensitivity(t) ** 2 for t in (1, 2, 3)]
        np.testing.assert_allclose(
            gamma2, [1, 1 + (1 - nu) ** 2 / 4, 1 + (1 - nu) ** 2 / 4 + 9 / 64 * (1 - nu) ** 4]
        )
    # γ_∞(0.05) = γ_{10^6} = 1.2840764619869: the AGM closed form and the series agree
    # (docs/design.md, note B2).
    assert ToeplitzNoise(nu=0.05).sensitivity(10**6) == pytest.approx(1.2840764619869, abs=1e-12)
    assert nu_gamma_infinity(0.05) == pytest.approx(1.2840764619869, abs=1e-12)


def test_truncation_recomputes_sensitivity():
    exact, truncated = ToeplitzNoise(nu=0.01), ToeplitzNoise(nu=0.01, taps=8)
    assert truncated.sensitivity(500) != pytest.approx(exact.sensitivity(500), rel=1e-3)
    assert truncated.sensitivity(60) == pytest.approx(
        max_column_norm(encoder_matrix(truncated, 60)), rel=1e-10
    )


def test_tree_prefix_variance_is_popcount_and_memory_is_logarithmic():
    tree = TreeNoise()
    steps = 100
    decoder = tree.noise_matrix(steps)
    popcounts = np.array([bin(t + 1).count("1") for t in range(steps)])
    np.testing.assert_array_equal(np.diag(decoder @ decoder.T), popcounts)
    key, dim = NoiseKey.generate(), 3
    state, live = tree.init(dim), []
    for _ in range(steps):
        _, state = tree.next(key, state)
        live.append(len(state.history))
    np.testing.assert_array_equal(live, popcounts)  # popcount(i) live node vectors at step i
    assert max(live) == 6 == math.floor(math.log2(steps + 1))
    assert tree.memory_floats(dim, steps) == 6 * dim
    # The example of Choquette-Choo, Ganesh & Thakurta (arXiv:2406.02716, Lemma 5.6): the prefix of 7
    # increments is s_{7,0} + s_{3,1} + s_{1,2}.
    assert sorted(np.flatnonzero(decoder[6]).tolist()) == [3, 5, 6]


def test_tree_sensitivity_levels():
    assert TreeNoise().sensitivity(1000) ** 2 == pytest.approx(10)  # each of 1,000 leaves lies in 10 nodes
    assert TreeNoise().sensitivity(1024) ** 2 == pytest.approx(11)
    assert TreeNoise().sensitivity(1) == 1.0


def test_memory_reports():
    assert IndependentNoise().memory_floats(10, 1000) == 0
    assert LambdaCorrelatedNoise(0.9).memory_floats(10, 1000) == 0
    assert ToeplitzNoise(nu=0.1).memory_floats(10, 1000) == 999 * 10
    assert ToeplitzNoise(nu=0.1, taps=16).memory_floats(10, 1000) == 15 * 10
    assert ToeplitzNoise(nu=0.1, history="replay").memory_floats(10, 1000) == 0
    _, state = run(ToeplitzNoise(nu=0.1, taps=4), NoiseKey.generate(), 10, 30)
    assert state.memory_floats() == 3 * 10


@pytest.mark.parametrize(
    "kind, kwargs, match",
    [
        ("lambda", {"correlation": 1.0}, r"\[0, 1\)"),
        ("lambda", {"correlation": -0.1}, r"\[0, 1\)"),
        ("lambda", {}, "needs correlation"),
        ("nu", {"nu": 0.0}, r"\(0, 1\]"),
        ("nu", {"nu": 1.5}, r"\(0, 1\]"),
        ("nu", {"nu": 0.1, "taps": 0}, "taps"),
        ("nu", {"nu": 0.1, "history": "disk"}, "history"),
        ("gaussian", {}, "noise must be one of"),
    ],
)
def test_bad_parameters_named(kind, kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_noise_process(kind, **kwargs)


def test_bad_dim_and_steps():
    with pytest.raises(ValueError, match="dim"):
        IndependentNoise().init(0)
    with pytest.raises(ValueError, match="num_steps"):
        TreeNoise().sensitivity(0)
