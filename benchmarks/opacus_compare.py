"""Opacus DP-SGD on the same linear model, data and ε (needs `make bench-peers`).

x ~ N(0, I_20), y = ⟨x, w*⟩ + N(0, 1), N = 10⁶, ε = 1, δ = 1e-6, one pass, batch 1,000, clip 8.
Opacus (1.6, `make_private_with_epsilon`) samples batches by Poisson sampling and accounts with
amplification under add/remove adjacency: at the same nominal ε it adds far less noise than a single
pass over disjoint batches can justify under replace-one. Its ε is therefore not the same guarantee as
dpstream's; both are printed with their assumptions. Speed is rows/s for one pass, same process.
Run: ``python -m benchmarks.opacus_compare``.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from benchmarks.ambssgd_utility import ambssgd
from benchmarks.common import excess, gaussian_regression, markdown_table, train
from dpstream.algorithms import DPSGD

N, D, EPSILON, DELTA, BATCH, CLIP, LR = 10**6, 20, 1.0, 1e-6, 1000, 8.0, 0.5


def opacus_run(X, y):
    import torch
    from opacus import PrivacyEngine

    torch.manual_seed(0)
    torch.set_num_threads(2)
    dataset = torch.utils.data.TensorDataset(
        torch.from_numpy(X.astype(np.float32)), torch.from_numpy(y.astype(np.float32))
    )
    loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH)
    model = torch.nn.Linear(D, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    engine = PrivacyEngine(accountant="prv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, optimizer, loader = engine.make_private_with_epsilon(
            module=model,
            optimizer=optimizer,
            data_loader=loader,
            target_epsilon=EPSILON,
            target_delta=DELTA,
            epochs=1,
            max_grad_norm=CLIP,
        )
        start = time.perf_counter()
        for features, labels in loader:
            optimizer.zero_grad()
            loss = 0.5 * ((model(features).squeeze(-1) - labels) ** 2).mean()
            loss.backward()
            optimizer.step()
        seconds = time.perf_counter() - start
    weights = model._module.weight.detach().numpy()[0].astype(np.float64)
    return weights, seconds, optimizer.noise_multiplier, engine.get_epsilon(DELTA)


def main() -> None:
    X, y, w_star = gaussian_regression(N, D, 1.0, seed=1)
    rows = []
    weights, seconds, sigma, claimed = opacus_run(X, y)
    rows.append(
        [
            "Opacus DP-SGD (Poisson, amplified, add/remove)",
            f"{excess(weights, w_star):.3g}",
            f"{N / seconds:,.0f}",
            f"{sigma:.3f}",
            f"{claimed:.3f} (PRV, Poisson sampling assumed)",
        ]
    )
    for label, algorithm in (
        (
            "dpstream one-pass DP-SGD (replace-one, no amplification)",
            DPSGD(EPSILON, DELTA, clip_norm=CLIP, learning_rate=LR, batch_size=BATCH, averaging="tail"),
        ),
        ("dpstream DP-AMBSSGD (gradient-norm DP-STAT)", ambssgd("gradient_norm")),
    ):
        start = time.perf_counter()
        result = train(algorithm, X, y)
        seconds = time.perf_counter() - start
        rows.append(
            [
                label,
                f"{excess(result.params, w_star):.3g}",
                f"{N / seconds:,.0f}",
                f"{result.report.noise_multiplier:.3f}",
                f"{result.report.epsilon:.3f} (exact GDP, single pass)",
            ]
        )
    print(
        f"N = {N:,}, d = {D}, σ = 1, target ε = {EPSILON}, δ = {DELTA:g}, batch {BATCH}, clip {CLIP}, lr {LR}\n"
    )
    print(
        markdown_table(
            ["method", "excess risk", "rows/s (one pass)", "noise multiplier", "ε as reported"], rows
        )
    )


if __name__ == "__main__":
    main()
