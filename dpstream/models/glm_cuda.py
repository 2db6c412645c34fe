"""One-pass GLM statistics on a GPU: a fused CUDA kernel. PRIVACY-CRITICAL (it clips).

The CPU kernels (``dpstream.models.glm_cpu``) read a chunk of a block twice: once for the margins
m_i = ⟨x_i, w⟩ and the norms ‖x_i‖, once for the transposed product Xᵀ(φ' ⊙ f). On a GPU both passes
and the per-row scalars between them fuse into one read of X (docs/design.md, note A8):

    per row i:  m_i = ⟨x_i, w⟩,  ‖x_i‖²,  s_i = φ'(m_i, y_i)  (or the SRGD difference, glm module doc),
                f_ik = min(1, C_k / (|s_i| ‖x_i‖))      (= ``dpstream.models.clipping.clip_factors``),
    per block:  S_k = Σ_i f_ik s_i x_i,  Σ_i φ(m_i, y_i),  #{i : f_ik < 1}.

A warp takes GROUP consecutive rows at a time. Lane ℓ loads columns ℓ, ℓ + 32, … of each (coalesced);
the GROUP dot products are one transposed warp sum (31 shuffles for 32 rows, after which lane r owns
row r); lane r computes row r's scalar and its K clip factors in float64, and every lane adds
coefficient(r, k)·x(r, its columns) to its K running sums, kept in registers.

Determinism (a retried step must release identical values): no atomics. Each warp sums at most
``ROWS_PER_WARP`` rows in the block's dtype (float32 error ≲ 512 ulp of the row terms, the same
order as the CPU kernels' float32 sums over 4096-row chunks), the warps of a thread block are added
in a fixed order in float64, and the per-block partials are summed by CuPy's fixed reduction tree.
The launch shape depends on the number of rows only, so the same block gives the same bits.

Shapes covered (float32; float64 halves the products): K ≤ 32 clip norms with d ≤ 64, K ≤ 16 with
d ≤ 128, K ≤ 8 with d ≤ 256 (``supports``); others use the chunked CuPy path in
``GLM._accumulate_on_device``. ``tests/gpu/test_cupy.py`` checks the kernel against the NumPy
statistics, the clip counts, the clipping bound and bit-identical retries.

This module picks the launch shape, compiles the kernel for the model's declared loss
(``dpstream.models.losses``; the source is ``dpstream.models.glm_cuda_source``), launches it and reduces
its partials.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpstream.models.glm_cuda_source import kernel_source
from dpstream.models.losses.base import LossDeclaration, declared_loss

__all__ = ["supports", "launch_fused", "collect", "Launch"]

WARPS_PER_BLOCK = 4
ROWS_PER_WARP = 512
_LANES_CHOICES = (1, 2, 4, 8)  # columns per lane E: d ≤ 32·E
_NORMS_CHOICES = (1, 4, 8, 16, 32)  # running sums per column KMAX: K ≤ KMAX
# Registers per lane, counted in 4-byte words: GROUP·E loaded values and KMAX·E running sums. Past ~200
# of 255 the kernel spills to local memory; these budgets keep it below.
_MAX_SUM_WORDS = 64
_MAX_ROW_WORDS = 64


def _shape(num_features: int, num_norms: int, dtype: np.dtype) -> tuple[int, int, int] | None:
    """(E, KMAX, GROUP): columns per lane, running sums per column and rows per warp step, or None
    where the kernel does not fit in registers."""
    words = np.dtype(dtype).itemsize // 4
    lanes = next((e for e in _LANES_CHOICES if 32 * e >= num_features), None)
    norms = next((k for k in _NORMS_CHOICES if k >= num_norms), None)
    if lanes is None or norms is None or lanes * norms * words > _MAX_SUM_WORDS:
        return None
    # 8 rows per step: the fastest on an H100 for 1 and 31 clip norms (BENCHMARKS.md, gpu_glm_kernel);
    # 16 or 32 spill registers and halve the throughput.
    group = min(8, _MAX_ROW_WORDS // (lanes * words))
    return lanes, norms, group


def supports(num_features: int, num_norms: int, dtype: np.dtype) -> bool:
    """Whether the fused kernel covers this block shape (else the chunked CuPy path runs)."""
    return (
        np.dtype(dtype) in (np.float32, np.float64)
        and num_norms >= 1
        and _shape(num_features, num_norms, dtype) is not None
    )


@dataclass(frozen=True)
class Launch:
    """Launch shape: warps per thread block, rows each warp sums (the float32 accumulation length) and
    rows per warp step (None: from the register budget). Tuned by ``benchmarks/gpu_glm_kernel.py``."""

    warps_per_block: int = WARPS_PER_BLOCK
    rows_per_warp: int = ROWS_PER_WARP
    group: int | None = None


@functools.cache
def _kernel(
    loss: LossDeclaration, type_name: str, lanes: int, norms: int, group: int, warps: int, rows_per_warp: int
) -> Any:
    """The kernel compiled for ``loss`` and this shape (``glm_cuda_source.kernel_source``)."""
    import cupy

    name = f"glm_fused<{type_name}, {lanes}, {norms}, {group}>"
    source = kernel_source(loss, warps, rows_per_warp)
    module = cupy.RawModule(code=source, options=("-std=c++17",), name_expressions=(name,))
    return module.get_function(name)


def launch_fused(
    X: Any,
    y: Any,
    params: np.ndarray,
    clip_norms: np.ndarray,
    loss: str,
    previous: np.ndarray | None = None,
    weight: float = 1.0,
    previous_weight: float = 0.0,
    statistic_kind: int = -1,
    launch: Launch = Launch(),
) -> tuple[Any, Any, Any, Any]:
    """Queue the kernel; returns the device arrays (partial sums, partial losses, partial clip counts,
    per-row values) without waiting for it (``collect`` reduces them).

    ``X`` is a C-contiguous CuPy block (float32 or float64), ``y`` its float64 labels on the device, as
    stored (the kernel maps them to the labels the declared ``loss`` reads).
    ``statistic_kind`` ≥ 0 asks for the DP-STAT values per row instead of the sums (0: gradient norm,
    1: residual |m − y|)."""
    import cupy

    rows, num_features = X.shape
    num_norms = len(clip_norms)
    lanes, norms, group = _shape(num_features, num_norms, X.dtype)
    group = launch.group or group
    combine = 2 if previous is not None and previous_weight != 0.0 else (1 if weight != 1.0 else 0)
    # One transfer in: the parameters, the previous parameters and the clip norms in one buffer.
    inputs = np.concatenate(
        [
            np.asarray(params, dtype=np.float64),
            np.asarray(previous if combine == 2 else params, dtype=np.float64),
            np.asarray(clip_norms, dtype=np.float64),
        ]
    )
    device_inputs = cupy.asarray(inputs)
    device_params = device_inputs[:num_features].astype(X.dtype)
    device_previous = device_inputs[num_features : 2 * num_features].astype(X.dtype)
    device_norms = device_inputs[2 * num_features :]
    blocks = max(1, math.ceil(rows / (launch.warps_per_block * launch.rows_per_warp)))
    values = cupy.empty(rows if statistic_kind >= 0 else 1, dtype=np.float64)
    allocate = cupy.empty if rows > 0 else cupy.zeros  # the kernel writes every partial
    partial_sums = allocate((blocks, num_norms * num_features), dtype=np.float64)
    partial_loss = allocate(blocks, dtype=np.float64)
    partial_clipped = allocate((blocks, num_norms), dtype=np.uint64)
    if rows > 0:
        kernel = _kernel(
            declared_loss(loss),
            "float" if X.dtype == np.float32 else "double",
            lanes,
            norms,
            group,
            launch.warps_per_block,
            launch.rows_per_warp,
        )
        kernel(
            (blocks,),
            (launch.warps_per_block * 32,),
            (
                X,
                y,
                np.int64(rows),
                np.int32(num_features),
                device_params,
                device_previous,
                np.int32(combine),
                np.float64(weight),
                np.float64(previous_weight),
                device_norms,
                np.int32(num_norms),
                np.int32(statistic_kind),
                values,
                partial_sums,
                partial_loss,
                partial_clipped,
            ),
        )
    return partial_sums, partial_loss, partial_clipped, values


def collect(
    partials: tuple[Any, Any, Any, Any], statistic_kind: int = -1
) -> tuple[np.ndarray, float, np.ndarray, Any]:
    """``launch_fused``'s partials reduced on the device and copied back once: (clipped sums (K, d)
    float64, loss sum, clipped-row counts (K,), the per-row DP-STAT values on the device or None)."""
    import cupy

    partial_sums, partial_loss, partial_clipped, values = partials
    num_norms = partial_clipped.shape[1]
    num_features = partial_sums.shape[1] // num_norms
    # One transfer out (each .get() waits for the device): counts are exact in float64 below 2**53.
    totals = cupy.concatenate(
        [
            partial_sums.sum(axis=0),
            partial_loss.sum(keepdims=True),
            partial_clipped.sum(axis=0).astype(np.float64),
        ]
    ).get()
    sums = totals[: num_norms * num_features].reshape(num_norms, num_features)
    loss_sum = float(totals[num_norms * num_features])
    clipped_rows = totals[num_norms * num_features + 1 :].astype(np.int64)
    return sums, loss_sum, clipped_rows, values if statistic_kind >= 0 else None
