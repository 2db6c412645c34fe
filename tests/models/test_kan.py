"""The B-spline KAN: basis, gradients against finite differences, the rank-one clipped sum against
materialised per-example gradients, chunking, DP-STAT counts and parameter validation."""

import numpy as np
import pytest
from scipy.interpolate import BSpline

from dpstream.backend import gpu_status
from dpstream.models import KANModel, StatsRequest
from dpstream.models import kan as kan_module
from dpstream.models.bspline import dense_basis, knots, num_basis, spline_pieces


@pytest.mark.parametrize("grid_size", [1, 3, 5, 10])
def test_basis_matches_scipy_and_spec_constants(grid_size):
    v = np.linspace(-1.0, 1.0, 401)
    ours = dense_basis(v, grid_size)
    t = knots(grid_size)
    reference = np.nan_to_num(
        np.stack(
            [BSpline.basis_element(t[k : k + 5], extrapolate=False)(v) for k in range(num_basis(grid_size))],
            axis=1,
        )
    )
    np.testing.assert_allclose(
        ours[:-1], reference[:-1], atol=1e-14
    )  # scipy's half-open support leaves 0 at v = 1
    np.testing.assert_allclose(
        ours.sum(axis=1), 1.0, atol=1e-14
    )  # partition of unity, right end point included
    squares = (ours**2).sum(axis=1)
    assert (
        squares.min() >= 1060 / 2304 - 1e-12 and squares.max() <= 0.5 + 1e-12
    )  # spec: [0.4601, 0.5], exact min 1060/2304 at s = 1/2
    assert ours.max() <= 2 / 3 + 1e-15 and np.count_nonzero(ours, axis=1).max() <= 4
    np.testing.assert_array_equal(
        dense_basis(np.array([-3.0, 7.0]), grid_size), dense_basis(np.array([-1.0, 1.0]), grid_size)
    )


def test_basis_derivative_matches_finite_differences():
    v = np.random.default_rng(0).uniform(-0.999, 0.999, 500)
    first, _, derivatives = spline_pieces(v, 5, derivative=True)
    step = 1e-6
    numeric = (dense_basis(v + step, 5) - dense_basis(v - step, 5)) / (2 * step)
    dense_derivative = np.zeros_like(numeric)
    for piece in range(4):
        dense_derivative[np.arange(v.size), first + piece] = derivatives[:, piece]
    np.testing.assert_allclose(dense_derivative, numeric, atol=2e-6)


def small_problem(activation="tanh", input_map="ball", rows=11, features=3, seed=1):
    model = KANModel(
        num_hidden=6,
        grid_size=4,
        activation=activation,
        feature_low=-2.0,
        feature_high=(2.0, 3.0, 2.5),
        input_map=input_map,
        seed=seed,
    )
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.5, 3.0, (rows, features))
    y = np.where(rng.random(rows) > 0.5, 1.0, -1.0)
    return model, X, y, model.init_params(features)


@pytest.mark.parametrize("activation, input_map", [("tanh", "ball"), ("sigmoid", "cube")])
def test_gradient_matches_finite_differences(activation, input_map):
    model, X, y, W = small_problem(activation, input_map)

    def total_loss(params):
        return model.loss(model.predict_margin(X, params), y).sum()

    step = 1e-6
    numeric = np.array(
        [(total_loss(W + step * e) - total_loss(W - step * e)) / (2 * step) for e in np.eye(W.size)]
    )
    stats = model.block_stats(X, y, StatsRequest(params=W))
    np.testing.assert_allclose(stats.clipped_sums[0], numeric, atol=1e-8 * max(1.0, np.abs(numeric).max()))
    assert stats.loss_sum == pytest.approx(total_loss(W), rel=1e-12) and stats.row_count == X.shape[0]


def test_clipped_sum_equals_materialised_per_example_gradients(monkeypatch):
    model, X, y, W = small_problem(rows=40)
    per_example = np.stack(
        [
            model.block_stats(X[i : i + 1], y[i : i + 1], StatsRequest(params=W)).clipped_sums[0]
            for i in range(40)
        ]
    )
    norms = np.linalg.norm(per_example, axis=1)
    clip_norms = np.array([np.quantile(norms, 0.2), np.median(norms), np.inf])
    expected = np.stack([(per_example * np.minimum(1.0, c / norms)[:, None]).sum(axis=0) for c in clip_norms])
    monkeypatch.setattr(kan_module, "CHUNK_ELEMENTS", 6 * 7)  # 7-row chunks: the chunked path must agree
    stats = model.block_stats(X, y, StatsRequest(params=W, clip_norms=clip_norms))
    np.testing.assert_allclose(stats.clipped_sums, expected, rtol=1e-10, atol=1e-14)
    np.testing.assert_array_equal(stats.clipped_rows, [(norms > c).sum() for c in clip_norms])
    thresholds = np.quantile(norms, [0.1, 0.5, 0.9])
    counts = model.block_stats(
        X, y, StatsRequest(params=W, thresholds=thresholds, statistic="gradient_norm"), role="stat"
    ).histogram
    np.testing.assert_array_equal(counts, [(norms <= t).sum() for t in thresholds])


def test_float32_blocks_and_public_initialisation():
    model, X, y, W = small_problem(rows=30)
    as_float32 = model.block_stats(X.astype(np.float32), y, StatsRequest(params=W)).clipped_sums
    as_float64 = model.block_stats(
        X.astype(np.float32).astype(np.float64), y, StatsRequest(params=W)
    ).clipped_sums
    np.testing.assert_array_equal(as_float32, as_float64)  # computed in float64 either way
    again = KANModel(num_hidden=6, grid_size=4, seed=1)
    np.testing.assert_array_equal(again.init_params(3), W)  # W₀ from the public seed only
    np.testing.assert_array_equal(again.second_layer(), model.second_layer())
    assert model.num_params(3) == 6 * 3 * 7 and model.second_layer().shape == (6, 7)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_hidden=0), "num_hidden must be a positive integer"),
        (dict(grid_size=2.5), "grid_size must be a positive integer"),
        (dict(activation="relu"), "activation must be 'tanh' or 'sigmoid'"),
        (dict(input_map="sphere"), "input_map must be 'ball' or 'cube'"),
        (dict(feature_low=1.0, feature_high=1.0), "feature_low < feature_high"),
        (dict(feature_high=np.inf), "finite public bounds"),
        (dict(backend="tpu"), "backend must be one of"),
    ],
)
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        KANModel(**kwargs)


def test_requests_the_kan_cannot_serve():
    model, X, y, W = small_problem()
    with pytest.raises(ValueError, match="Accelerated-DP-SRGD supports linear models only"):
        model.block_stats(X, y, StatsRequest(params=W, previous_params=W, previous_weight=1.0))
    with pytest.raises(ValueError, match="statistic='gradient_norm'"):
        model.block_stats(X, y, StatsRequest(params=W, thresholds=np.array([1.0])), role="stat")
    with pytest.raises(ValueError, match="expected m·d·p = 126"):
        model.block_stats(X, y, StatsRequest(params=W[:-1]))


@pytest.mark.skipif(
    gpu_status()[0], reason="this machine has a GPU; the no-GPU error path cannot be exercised"
)
def test_cupy_backend_without_a_gpu_says_why():
    with pytest.raises(RuntimeError, match=r"backend='cupy' needs a GPU: .*use backend='numpy' or 'auto'"):
        KANModel(backend="cupy")
    model, X, y, W = small_problem()
    auto = KANModel(
        num_hidden=6,
        grid_size=4,
        feature_low=-2.0,
        feature_high=(2.0, 3.0, 2.5),
        input_map="ball",
        seed=1,
        backend="auto",
    )
    np.testing.assert_array_equal(
        auto.block_stats(X, y, StatsRequest(params=W)).clipped_sums,
        model.block_stats(X, y, StatsRequest(params=W)).clipped_sums,
    )  # falls back to NumPy


def test_every_model_implements_the_model_protocol():
    from dpstream.models import LinearRegressionModel, LogisticRegressionModel, Model

    for model in (LinearRegressionModel(), LogisticRegressionModel(), KANModel(num_hidden=4, grid_size=3)):
        assert isinstance(model, Model), type(model).__name__
        params = model.init_params(3)
        assert params.shape == (model.num_params(3),) and params.dtype == np.float64
        assert model.predict_margin(np.zeros((5, 3)), params).shape == (5,)
    assert not isinstance(object(), Model)


@pytest.mark.parametrize("activation", ["tanh", "sigmoid"])
def test_cpu_output_layer_kernel_against_the_basis_statement(activation):
    """kan_cpu's one-pass output layer against f = (1/√m) Σ_j Σ_k c_jk b_k(σ(z_j)) written with the
    scipy-checked basis, and a_j against a central difference of unit j's output in z_j."""
    from dpstream.models.kan_cpu import output_layer

    model = KANModel(num_hidden=9, grid_size=4, activation=activation)
    rng = np.random.default_rng(3)
    Z = rng.normal(0.0, 2.0, (50, 9))
    Z[0, :3] = [0.0, 40.0, -40.0]  # the grid's middle and both saturated ends
    c, G = model.second_layer(), model.grid_size

    def units(z):  # (rows, m): Σ_k c_jk b_k(σ(z_j))
        u = np.tanh(z) if activation == "tanh" else 1.0 / (1.0 + np.exp(-z))
        return np.einsum("rjk,jk->rj", dense_basis(u, G), c)

    margins, a, a_square_norms = output_layer(
        Z.copy(), model.output_polynomials(), G, 1.0, activation == "sigmoid", True
    )  # it overwrites its input
    np.testing.assert_allclose(margins, units(Z).sum(axis=1) / 3.0, rtol=1e-12, atol=1e-12)
    step = 1e-6
    np.testing.assert_allclose(a, (units(Z + step) - units(Z - step)) / (2 * step), atol=1e-6)
    np.testing.assert_allclose(a_square_norms, (a * a).sum(axis=1), rtol=1e-12)
    sigmoid = activation == "sigmoid"
    scaled, _, _ = output_layer(2.0 * Z, model.output_polynomials(), G, 0.5, sigmoid, False)
    unscaled, _, _ = output_layer(Z.copy(), model.output_polynomials(), G, 1.0, sigmoid, False)
    np.testing.assert_array_equal(scaled, unscaled)  # z = scale · Z
    np.testing.assert_allclose(unscaled, margins, rtol=1e-14)  # alone, the sum may run in another order


def test_nan_parameters_give_nan_margins_not_a_read_outside_the_arrays():
    model, X, y, W = small_problem(rows=12)
    params = W.copy()
    params[0] = np.nan  # a diverged run: hidden unit 0's pre-activation is NaN on every row
    assert np.isnan(model.predict_margin(X, params)).all()
    with np.errstate(invalid="ignore"):
        assert np.isnan(model.block_stats(X, y, StatsRequest(params=params)).loss_sum)
