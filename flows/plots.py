"""PNG plots for a run: training loss per step (non-private, operator only), clip norm per step (DP
outputs), and ε as a function of δ for the run's μ (from the exact curve); each only where it carries
information (``render_plots``)."""

from __future__ import annotations

import io

import numpy as np

from dpstream.privacy import epsilon_for_delta

__all__ = ["render_plots"]


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, dpi=100, format="png")
    return buffer.getvalue()


def render_plots(report, losses) -> dict[str, tuple[str, bytes]]:
    """{plot name: (file name, PNG bytes)}: the caller writes them wherever the run publishes (fsspec).
    Only plots that carry information: the training loss where there are two steps or more, the clip
    norm where it changed between steps (DP-STAT's trace; a fixed clip norm is in the report), and
    always the privacy curve."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = {}
    if len(losses) > 1:
        figure, axis = plt.subplots(figsize=(6, 3.5))
        axis.plot(np.arange(1, len(losses) + 1), losses)
        axis.set(
            xlabel="step",
            ylabel="mean loss of the step's rows",
            title="Training loss (non-private, operator only)",
        )
        paths["loss_plot"] = ("loss.png", _png(figure))
        plt.close(figure)

    if len(report.clip_norms) > 1:
        figure, axis = plt.subplots(figsize=(6, 3.5))
        clips = report.clip_norms
        axis.step(np.arange(1, len(clips) + 1), clips, where="post")
        axis.set(xlabel="step", ylabel="clip norm", yscale="log", title="Clip norm per step (DP outputs)")
        paths["clip_plot"] = ("clip_norm.png", _png(figure))
        plt.close(figure)

    figure, axis = plt.subplots(figsize=(6, 3.5))
    deltas = np.logspace(-12, -2, 60)
    axis.plot(deltas, [epsilon_for_delta(d, report.mu) for d in deltas])
    axis.set(
        xscale="log",
        xlabel="δ",
        ylabel="ε",
        title=f"Privacy curve of this run ({report.mu:.4g}-GDP, {report.relation})",
    )
    paths["epsilon_plot"] = ("epsilon_delta.png", _png(figure))
    plt.close(figure)
    return paths
