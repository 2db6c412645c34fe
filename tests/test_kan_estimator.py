"""DPKANClassifier: learns what a linear model cannot, reports exactly, validates its bounds."""

import numpy as np
import pytest

from dpstream.estimators import DPKANClassifier, DPLogisticRegression
from dpstream.estimators.kan import theorem_f12_noise_multiplier
from dpstream.noise import NoiseKey
from dpstream.privacy import epsilon_for_delta


def disc(rows, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, (rows, 4))
    return X, np.where((X[:, :2] ** 2).sum(axis=1) < 0.5, "inside", "outside")


def test_kan_learns_a_disc_that_logistic_regression_cannot():
    X, y = disc(100_000, 0)
    X_test, y_test = disc(20_000, 1)
    base_rate = max(np.mean(y_test == "inside"), np.mean(y_test == "outside"))  # 0.60
    kan = DPKANClassifier(
        epsilon=1.0, num_hidden=32, batch_size=256, noise_key=NoiseKey.from_secret(b"k" * 32)
    ).fit(X, y)
    linear = DPLogisticRegression(epsilon=1.0, algorithm="dpsgd", noise="lambda").fit(X, y)
    # Measured at 200,000 rows: KAN 0.957 to 0.969 at ε = 1 over three settings; logistic = the base rate.
    assert np.mean(kan.predict(X_test) == y_test) > 0.9
    assert np.mean(linear.predict(X_test) == y_test) < base_rate + 0.03
    assert set(kan.classes_) == {"inside", "outside"} and kan.predict_proba(X_test[:5]).shape == (5, 2)
    report = kan.privacy_report_
    assert report.epsilon == pytest.approx(1.0, rel=1e-9)
    assert epsilon_for_delta(1e-6, report.mu) == pytest.approx(report.epsilon, rel=1e-12)
    assert "lambda" in report.mechanism and any("Theorem F.12" in note for note in report.notes)
    assert kan.weights_.shape == (32, 4 * 8) and kan.n_steps_ == 100_000 // 256


def test_theorem_f12_reference_values():
    # docs/design.md, note D3: n = 60,000, ε = 1, δ = 1e-5: κ_F.12 = 192.1 (λ = 0.5), 96.1 (λ = 0),
    # 960.5 (λ = 0.9)
    for correlation, expected in ((0.5, 192.1), (0.0, 96.1), (0.9, 960.5)):
        assert theorem_f12_noise_multiplier(1.0, 1e-5, 5000, 600 / 60_000, correlation) == pytest.approx(
            expected, abs=0.05
        )


def test_bounds_must_match_the_features():
    X, y = disc(1000, 0)
    with pytest.raises(ValueError, match=r"feature_low has 3 entries; give one per feature \(4\)"):
        DPKANClassifier(feature_low=[-1.0, -1.0, -1.0], feature_high=1.0).fit(X, y)
    with pytest.raises(ValueError, match="give both feature_low and feature_high"):
        DPKANClassifier(feature_low=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="'activation' parameter"):
        DPKANClassifier(activation="relu").fit(X, y)
