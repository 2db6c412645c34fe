"""DP-AMBSSGD and DP-STAT: plan, privacy report, DP-STAT guarantees, and small-scale utility claims."""

import math

import numpy as np
import pytest

from dpstream.algorithms import DPAMBSSGD, DPSGD, dp_stat_threshold
from dpstream.privacy import GdpAccountant, epsilon_for_delta, mu_for_epsilon_delta

from .helpers import excess_risk, fixed_key, gaussian_regression, train

D = 20


def paper_config(rows, **overrides):
    r_x = math.sqrt(D + 2)
    kwargs = dict(
        bound=r_x * 2 * math.log(rows), feature_norm=r_x, hessian_norm=1.0
    )  # isotropic test data: ‖H‖ = 1
    kwargs.update(overrides)
    return DPAMBSSGD(1.0, 1e-6, **kwargs)


def test_plan_is_single_pass_with_disjoint_stat_and_gradient_rows():
    plan = paper_config(10**6).plan(10**6, D)
    assert plan.num_steps == round(4 * math.log(10**6)) == 55
    seen = np.zeros(10**6, dtype=bool)
    for span in plan.spans:
        for lo, hi in (span.stat_rows, span.gradient_rows):
            assert not seen[lo:hi].any()
            seen[lo:hi] = True
    assert plan.rows_used <= 10**6
    assert plan.stat_rows == 1653 and plan.gradient_rows == 16528  # s, b (docs/design.md, note A7)


def test_too_few_rows_refused():
    with pytest.raises(ValueError, match="too few rows for the plan: n_samples=1"):
        paper_config(100).plan(1, D)
    with pytest.raises(ValueError, match="too few rows for the plan"):
        paper_config(100, num_steps=30).plan(40, D)
    # Small N: fewer steps so DP-STAT keeps s ≥ 10·sqrt(K)·α stat rows (docs/design.md, note A4).
    plan = paper_config(100).plan(100_000, D)
    assert plan.stat_rows >= 10 * plan.count_noise_std


@pytest.mark.parametrize("disjoint", [False, True])
def test_report_matches_accountant(disjoint):
    algorithm = paper_config(10**5, disjoint_accounting=disjoint)
    plan = algorithm.plan(10**5, D)
    report = algorithm.report(plan)
    alpha = plan.alpha
    expected_mu = (1.0 if disjoint else math.sqrt(2)) / alpha
    assert report.mu == pytest.approx(expected_mu, rel=1e-12)
    assert report.epsilon == pytest.approx(1.0, rel=1e-9)
    assert report.epsilon == pytest.approx(epsilon_for_delta(1e-6, report.mu), rel=1e-12)
    # The conservative rate is Varshney et al.'s zCDP amount (Thm 3.6): ρ = 1/α² for one round (μ² = 2/α²).
    if not disjoint:
        assert GdpAccountant().compose(algorithm.step_event(plan)).rho == pytest.approx(1 / alpha**2)
    assert report.relation == "replace-one"


def test_exact_alpha_beats_papers_zcdp_alpha():
    # Varshney et al.'s zCDP route needs α = 7.566 at ε = 1, δ = 1e-6 (note A6); exact GDP needs less noise.
    alpha = DPAMBSSGD(1.0, 1e-6, bound=10.0, feature_norm=1.0, disjoint_accounting=False).noise_multiplier
    assert alpha == pytest.approx(math.sqrt(2) / mu_for_epsilon_delta(1.0, 1e-6))
    assert alpha < 7.566


def test_parallel_composition_is_the_default():
    # Stat and gradient rows are disjoint, fixed by N alone: each record is in one mechanism, μ = 1/α.
    algorithm = DPAMBSSGD(1.0, 1e-6, bound=10.0, statistic="gradient_norm")
    plan = algorithm.plan(10**5, D)
    assert algorithm.disjoint_accounting
    assert plan.alpha == pytest.approx(1 / mu_for_epsilon_delta(1.0, 1e-6))
    assert algorithm.report(plan).epsilon == pytest.approx(1.0, rel=1e-9)
    assert "parallel composition" in algorithm.report(plan).notes[0]
    # Less noise than the conservative charge at the same ε, by exactly sqrt(2).
    conservative = DPAMBSSGD(1.0, 1e-6, bound=10.0, statistic="gradient_norm", disjoint_accounting=False)
    assert conservative.noise_multiplier / algorithm.noise_multiplier == pytest.approx(math.sqrt(2))


def test_default_step_is_stable_for_any_distribution_with_the_row_bound():
    # η = 1/R² when ‖H‖ is not declared: η·λ_max ≤ 1 < 2 for every x with ‖x‖ ≤ R.
    algorithm = DPAMBSSGD(1.0, 1e-6, bound=10.0, statistic="gradient_norm", feature_norm=3.0)
    plan = algorithm.plan(10**5, D)
    assert plan.learning_rate == pytest.approx(1 / 9.0)
    paper = DPAMBSSGD(
        1.0, 1e-6, bound=10.0, statistic="gradient_norm", feature_norm=3.0, hessian_norm=1.0
    ).plan(10**5, D)
    grad = paper.gradient_rows
    assert paper.learning_rate == pytest.approx(grad / (9.0 + grad - 1))


def test_dpstat_zero_noise_returns_smallest_covering_level():
    thresholds = 2.0 ** np.arange(-5, 5)
    residuals = np.array([0.1, 0.7, 2.9, 3.1])
    counts = np.array([(residuals <= t).sum() for t in thresholds])
    index = dp_stat_threshold(counts, np.zeros_like(thresholds), stat_rows=4, slack=0.0)
    assert thresholds[index] == 4.0  # first grid value covering all residuals
    assert dp_stat_threshold(np.zeros(10), np.zeros(10), stat_rows=4, slack=0.0) == 10  # none: the cap


def test_dpstat_lower_guarantee_lemma_3_10():
    """If DP-STAT breaks at γ, the true count is ≥ s − Γ with probability ≥ 1 − β (Lemma 3.10)."""
    rng = np.random.default_rng(3)
    K, alpha, s, beta = 30, 7.0, 2000, 0.05
    gamma_slack = alpha * math.sqrt(K) * math.sqrt(2 * math.log(2 * K / beta))
    residuals = np.abs(rng.standard_cauchy(s))  # heavy tail: early breaks are plausible
    thresholds = 2.0 ** (np.arange(K) - 15)
    counts = np.array([(residuals <= t).sum() for t in thresholds])
    failures, trials = 0, 4000
    for _ in range(trials):
        index = dp_stat_threshold(counts, rng.normal(0, math.sqrt(K) * alpha, K), s, slack=0.0)
        true_count = counts[index] if index < K else s
        failures += true_count < s - gamma_slack
    # Allow 4 binomial standard deviations above β.
    assert failures / trials <= beta + 4 * math.sqrt(beta * (1 - beta) / trials)


def test_dpstat_paper_rule_overshoots_geometrically_and_slack_fixes_it():
    """docs/design.md, note A3: after full coverage the paper rule doubles again w.p. 1/2 each level."""
    rng = np.random.default_rng(4)
    K, alpha, s, level = 24, 5.0, 10_000, 8
    counts = np.where(np.arange(K) >= level, s, 0)  # all covered from `level` on, far below before
    noise_std = math.sqrt(K) * alpha
    trials = 20_000
    extra = np.array(
        [dp_stat_threshold(counts, rng.normal(0, noise_std, K), s, 0.0) - level for _ in range(trials)]
    )
    for j in range(4):
        p = 2.0 ** -(j + 1)
        assert abs(np.mean(extra == j) - p) < 5 * math.sqrt(p * (1 - p) / trials)
    slack = [dp_stat_threshold(counts, rng.normal(0, noise_std, K), s, 3 * noise_std) for _ in range(2000)]
    assert np.mean(np.array(slack) == level) >= 0.99


def test_tail_average_and_clip_history():
    X, y, _ = gaussian_regression(200_000, D, 1.0)
    iterates = []
    result = train(paper_config(200_000), X, y, on_step=lambda step, state: iterates.append(state.params))
    T = len(iterates)
    np.testing.assert_allclose(result.params, np.mean(iterates[T // 2 :], axis=0), rtol=1e-12)
    assert result.state.average_count == T - T // 2
    assert len(result.report.clip_norms) == T
    grid = paper_config(200_000).clip_norms(200_000, D)
    assert all(np.isclose(grid, c).any() for c in result.report.clip_norms)  # ζ_t on the candidate grid


def _predicted(result, plan, sigma):
    """The predictor of docs/design.md, note A7: (d/T)(σ²/b + 4α²·mean(ζ_t²)/b²) over the tail window."""
    T, b, alpha = plan.num_steps, plan.gradient_rows, plan.alpha
    tail = np.array(result.report.clip_norms[T // 2 :])
    return D / T * (sigma**2 / b + 4 * alpha**2 * np.mean(tail**2) / b**2)


@pytest.mark.slow
def test_utility_claims_small_scale():
    """Note A7 at N = 3·10⁵: within [0.3, 3]× of the predictor, the σ² scaling, and σ = 0 exactness."""
    rows = 300_000
    algorithm = paper_config(rows)
    plan = algorithm.plan(rows, D)
    excess = {}
    for sigma in (1.0, 0.1, 0.0):
        X, y, w_star = gaussian_regression(rows, D, sigma, seed=11)
        result = train(algorithm, X, y)
        excess[sigma] = excess_risk(result.params, w_star)
        if sigma > 0:
            assert 0.3 <= excess[sigma] / _predicted(result, plan, sigma) <= 3.0
    assert excess[1.0] / excess[0.1] >= 30  # measured 165× (note A7)
    assert excess[0.0] < 1e-10  # σ = 0: the clip norm, and the noise with it, shrinks with the residuals
    # Fixed-clip one-pass DP-SGD at the same ε plateaus at σ = 0.1 (the separation of note A7).
    X, y, w_star = gaussian_regression(rows, D, 0.1, seed=11)
    fixed_clip = math.sqrt(D) * math.sqrt(1 + 0.1**2) * math.log(rows)
    fixed = DPSGD(
        1.0, 1e-6, clip_norm=fixed_clip, learning_rate=1.0, batch_size=plan.gradient_rows, averaging="tail"
    )
    fixed_excess = excess_risk(train(fixed, X, y).params, w_star)
    assert fixed_excess >= 10 * excess[0.1]


class CountingExecutor:
    """The in-memory executor, recording the number of clip norms of every request it computes."""

    def __init__(self, X, y, blocks=4):
        from dpstream.coordinator import InMemoryExecutor
        from dpstream.models import LinearRegressionModel

        self.inner = InMemoryExecutor(
            LinearRegressionModel(), zip(np.array_split(X, blocks), np.array_split(y, blocks), strict=True)
        )
        self.model, self.widths = self.inner.model, []

    def compute(self, span, request):
        self.widths.append(len(request.clip_norms))
        return self.inner.compute(span, request)


def _fit_counting(algorithm, X, y):
    from dpstream.coordinator import run

    executor = CountingExecutor(X, y)
    result = run(
        algorithm, executor, num_rows=len(y), num_params=D, initial_params=np.zeros(D), key=fixed_key()
    )
    return result, executor.widths


@pytest.mark.parametrize("window", [0, 2])
def test_candidate_window_releases_what_all_candidates_release(window):
    """The window only changes which clipped sums the workers compute: DP-STAT picks the same ζ_t at every
    step and the model equals the all-candidates run up to the GEMM's rounding. A window of 0 forces
    follow-up round trips (each counted), a window of 2 needs few; the first step computes all K + 1."""
    X, y, _ = gaussian_regression(200_000, D, 0.5, seed=3)
    kwargs = dict(bound=1e3, statistic="gradient_norm", hessian_norm=1.0)
    reference, all_widths = _fit_counting(DPAMBSSGD(1.0, 1e-6, candidate_window=None, **kwargs), X, y)
    windowed, widths = _fit_counting(DPAMBSSGD(1.0, 1e-6, candidate_window=window, **kwargs), X, y)
    steps = reference.report.steps
    assert all_widths == [31] * steps
    assert windowed.state.clip_history == reference.state.clip_history
    np.testing.assert_allclose(windowed.params, reference.params, rtol=1e-9, atol=1e-12)
    history = np.log2(np.array(reference.state.clip_history))
    expected_followups = int(np.sum(np.abs(np.diff(history)) > window + 0.5))
    assert widths[0] == 31 and len(widths) == steps + expected_followups
    assert widths.count(1) - (steps - 1 if window == 0 else 0) == expected_followups
    assert max(widths[1:]) == 2 * window + 1
    if window == 0:
        assert expected_followups >= 1  # the early steps move ζ: the fallback path ran


def test_apply_refuses_statistics_of_another_request():
    algorithm = DPAMBSSGD(1.0, 1e-6, bound=1e3, statistic="gradient_norm", candidate_window=0)
    X, y, _ = gaussian_regression(50_000, D, 0.5)
    plan = algorithm.plan(len(y), D)
    state = algorithm.init(plan, np.zeros(D))
    first = plan.spans[0]
    from dpstream.models import LinearRegressionModel

    model = LinearRegressionModel()
    request = algorithm.request(state, first, plan)
    stats = model.block_stats(X[slice(*first.stat_rows)], y[slice(*first.stat_rows)], request, role="stat")
    stats = stats + model.block_stats(
        X[slice(*first.gradient_rows)], y[slice(*first.gradient_rows)], request, role="gradient"
    )
    state = algorithm.apply(state, first, stats, fixed_key(), plan)
    second = plan.spans[1]
    with pytest.raises(ValueError, match="expects clipped sums for candidates"):
        algorithm.apply(state, second, stats, fixed_key(), plan)  # 31 rows where the window asks for 1
    narrow = algorithm.request(state, second, plan)
    assert len(narrow.clip_norms) == 1
    lone = model.block_stats(X[slice(*second.stat_rows)], y[slice(*second.stat_rows)], narrow, role="stat")
    lone = lone + model.block_stats(
        X[slice(*second.gradient_rows)], y[slice(*second.gradient_rows)], narrow, role="gradient"
    )
    if algorithm.followup(state, second, lone, fixed_key(), plan) is not None:
        with pytest.raises(ValueError, match="needs the statistics of followup"):
            algorithm.apply(state, second, lone, fixed_key(), plan)


def test_candidate_window_is_validated():
    with pytest.raises(ValueError, match="candidate_window must be a non-negative integer"):
        DPAMBSSGD(1.0, 1e-6, bound=1e3, statistic="gradient_norm", candidate_window=-1)
