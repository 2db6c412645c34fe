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
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["supports", "launch_fused", "collect", "Launch", "LOSS_KINDS"]

LOSS_KINDS = {"linear": 0, "logistic": 1}
WARPS_PER_BLOCK = 4
ROWS_PER_WARP = 512
_LANES_CHOICES = (1, 2, 4, 8)  # columns per lane E: d ≤ 32·E
_NORMS_CHOICES = (1, 4, 8, 16, 32)  # running sums per column KMAX: K ≤ KMAX
# Registers per lane, counted in 4-byte words: GROUP·E loaded values and KMAX·E running sums. Past ~200
# of 255 the kernel spills to local memory; these budgets keep it below.
_MAX_SUM_WORDS = 64
_MAX_ROW_WORDS = 64

_SOURCE = r"""
#define WARPS %(warps)d
#define ROWS_PER_WARP %(rows_per_warp)d
#define FULL 0xffffffffu

// Sums of GROUP per-lane values across the warp, transposed: afterwards lane L holds the total of
// value L %% GROUP. 31 shuffles for 32 values instead of 5 per value; each total is computed in one
// fixed order, and lanes holding the same total hold the same bits.
template <typename V, int GROUP>
__device__ __forceinline__ V transposed_totals(V (&v)[GROUP], int lane) {
#pragma unroll
  for (int offset = 16; offset >= 1; offset >>= 1) {
    if (offset >= GROUP) {
#pragma unroll
      for (int i = 0; i < GROUP; ++i) v[i] += __shfl_xor_sync(FULL, v[i], offset);
    } else {
      const bool upper = lane & offset;
#pragma unroll
      for (int i = 0; i < offset; ++i) {
        const V send = upper ? v[i] : v[i + offset];
        const V keep = upper ? v[i + offset] : v[i];
        v[i] = keep + __shfl_xor_sync(FULL, send, offset);
      }
    }
  }
  return v[0];
}

// VECTOR consecutive values from 16-byte aligned shared memory in one load (a broadcast to the warp).
template <typename T, int VECTOR>
__device__ __forceinline__ void load_vector(const T* source, T (&out)[VECTOR]) {
  if constexpr (VECTOR == 4 && sizeof(T) == 4) {
    const float4 v = *reinterpret_cast<const float4*>(source);
    out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
  } else if constexpr (VECTOR == 2 && sizeof(T) == 8) {
    const double2 v = *reinterpret_cast<const double2*>(source);
    out[0] = v.x; out[1] = v.y;
  } else {
#pragma unroll
    for (int i = 0; i < VECTOR; ++i) out[i] = source[i];
  }
}

// phi'(m, y) and phi(m, y): squared loss (kind 0) or logistic loss with y in {-1, +1} (kind 1).
__device__ __forceinline__ double derivative_and_loss(int loss_kind, double margin, double label, double* loss) {
  if (loss_kind == 0) {
    double residual = margin - label;
    *loss = 0.5 * residual * residual;
    return residual;
  }
  double z = -label * margin;
  *loss = fmax(z, 0.0) + log1p(exp(-fabs(z)));
  return -label * 0.5 * (1.0 + tanh(0.5 * z));  // -y expit(-y m)
}

// A warp takes GROUP consecutive rows at a time: lane l loads columns l, l + 32, ... of each (coalesced),
// the per-row dot products are transposed warp sums (lane r then owns row r), lane r computes row r's
// scalar and its K clip factors, and every lane adds coefficient(r, k) * x(r, its columns) to its sums.
// combine: 0 = phi', 1 = weight * phi', 2 = the SRGD difference
//   weight * (phi'(m) - phi'(m_prev)) + (weight - prev_weight) * phi'(m_prev).
// statistic_kind < 0: clipped sums; 0: write |s_i| ||x_i|| per row; 1: write |m_i - y_i| per row.
template <typename T, int E, int KMAX, int GROUP>
__global__ void __launch_bounds__(WARPS * 32) glm_fused(
    const T* __restrict__ X, const double* __restrict__ y, long long n, int d,
    const T* __restrict__ params, const T* __restrict__ previous, int combine, double weight, double previous_weight,
    const double* __restrict__ clip_norms, int K, int loss_kind, int statistic_kind, double* __restrict__ values,
    double* __restrict__ partial_sums, double* __restrict__ partial_loss, unsigned long long* __restrict__ partial_clipped) {
  __shared__ double block_sums[KMAX * E * 32];
  __shared__ double block_loss[WARPS];
  __shared__ unsigned int block_clipped[WARPS][KMAX];
  __shared__ __align__(16) T coefficients[WARPS][GROUP][KMAX];  // zero for k >= K
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane < KMAX) block_clipped[warp][lane] = 0;
  T w[E], w_previous[E];
  T sums[KMAX][E];
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int column = lane + 32 * e;
    w[e] = column < d ? params[column] : T(0);
    w_previous[e] = (combine == 2 && column < d) ? previous[column] : T(0);
#pragma unroll
    for (int k = 0; k < KMAX; ++k) sums[k][e] = T(0);
  }
  double loss_total = 0.0;
  const long long warp_rows = (long long)blockIdx.x * WARPS * ROWS_PER_WARP + (long long)warp * ROWS_PER_WARP;
  __syncwarp();

  for (int j = 0; j < ROWS_PER_WARP; j += GROUP) {
    const long long first = warp_rows + j;
    if (first >= n) break;
    T x[GROUP][E];
#pragma unroll
    for (int r = 0; r < GROUP; ++r)
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const int column = lane + 32 * e;
        x[r][e] = (first + r < n && column < d) ? X[(first + r) * d + column] : T(0);
      }
    T dot[GROUP], squares[GROUP];
#pragma unroll
    for (int r = 0; r < GROUP; ++r) {
      dot[r] = T(0);
      squares[r] = T(0);
#pragma unroll
      for (int e = 0; e < E; ++e) {
        dot[r] += x[r][e] * w[e];
        squares[r] += x[r][e] * x[r][e];
      }
    }
    const double margin = (double)transposed_totals<T, GROUP>(dot, lane);
    const double norm = sqrt((double)transposed_totals<T, GROUP>(squares, lane));
    double margin_previous = 0.0;
    if (combine == 2) {
#pragma unroll
      for (int r = 0; r < GROUP; ++r) {
        dot[r] = T(0);
#pragma unroll
        for (int e = 0; e < E; ++e) dot[r] += x[r][e] * w_previous[e];
      }
      margin_previous = (double)transposed_totals<T, GROUP>(dot, lane);
    }
    // This lane's row (lanes >= GROUP mirror lane %% GROUP and own nothing).
    const long long row = first + (lane %% GROUP);
    const bool owner = lane < GROUP && row < n;
    double label = row < n ? y[row] : 0.0;
    if (loss_kind == 1) label = label > 0 ? 1.0 : -1.0;
    double loss, unused;
    double scalar = derivative_and_loss(loss_kind, margin, label, &loss);
    if (combine == 2) {
      const double previous_scalar = derivative_and_loss(loss_kind, margin_previous, label, &unused);
      scalar = weight * (scalar - previous_scalar) + (weight - previous_weight) * previous_scalar;
    } else if (combine == 1) {
      scalar = weight * scalar;
    }
    const double gradient_norm = fabs(scalar) * norm;
    if (owner) loss_total += loss;
    if (statistic_kind >= 0) {
      if (owner) values[row] = statistic_kind == 1 ? fabs(margin - label) : gradient_norm;
      continue;
    }
    // Row r's coefficients go through shared memory: one vector load then gives every lane four of them
    // (a shuffle gives one). 1 / norm once per row: C * (1 / g) is within an ulp of C / g in float64,
    // far below the rounding of the coefficient to the block's dtype that follows.
    const double inverse_norm = 1.0 / gradient_norm;  // inf for a zero norm: factor 1
    // The 32 / GROUP lanes that mirror row r share its K factors: lane l computes k = l / GROUP,
    // l / GROUP + 32 / GROUP, ... (a quarter of the float64 work per lane for GROUP = 8).
    constexpr int LANES_PER_ROW = 32 / GROUP;
    constexpr int FACTORS_PER_LANE = (KMAX + LANES_PER_ROW - 1) / LANES_PER_ROW;
    const bool row_valid = row < n;
#pragma unroll
    for (int j = 0; j < FACTORS_PER_LANE; ++j) {
      const int k = lane / GROUP + j * LANES_PER_ROW;
      if (k < KMAX) {
        const bool used = row_valid && k < K;
        const double factor = used ? fmin(1.0, clip_norms[k] * inverse_norm) : 1.0;
        coefficients[warp][lane %% GROUP][k] = used ? (T)(scalar * factor) : T(0);
        if (used && factor < 1.0) atomicAdd(&block_clipped[warp][k], 1u);  // integer: order-free
      }
    }
    __syncwarp();
    constexpr int VECTOR = KMAX >= 16 / (int)sizeof(T) ? 16 / (int)sizeof(T) : 1;  // coefficients per load
#pragma unroll
    for (int r = 0; r < GROUP; ++r)
#pragma unroll
      for (int k = 0; k < KMAX; k += VECTOR) {
        T c[VECTOR];
        load_vector<T, VECTOR>(&coefficients[warp][r][k], c);
#pragma unroll
        for (int v = 0; v < VECTOR; ++v)
#pragma unroll
          for (int e = 0; e < E; ++e) sums[k + v][e] += c[v] * x[r][e];
      }
    __syncwarp();  // the next group overwrites the coefficients
  }

  // The warps of this block in a fixed order, in float64: no atomics, the same bits on a retry.
  for (int turn = 0; turn < WARPS; ++turn) {
    if (warp == turn) {
#pragma unroll
      for (int k = 0; k < KMAX; ++k)
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const int slot = (k * E + e) * 32 + lane;
          block_sums[slot] = (turn == 0 ? 0.0 : block_sums[slot]) + (double)sums[k][e];
        }
    }
    __syncthreads();
  }
  // Lane 0 of each warp holds the loss of rows owned by lane 0 only: gather the owners' losses.
  for (int offset = 16; offset >= 1; offset >>= 1) loss_total += __shfl_down_sync(FULL, loss_total, offset);
  if (lane == 0) block_loss[warp] = loss_total;
  __syncthreads();
  const long long out = (long long)blockIdx.x * K * d;
  for (int i = threadIdx.x; i < K * d; i += blockDim.x) {
    const int k = i / d, column = i - k * d;
    partial_sums[out + i] = block_sums[(k * E + column / 32) * 32 + column %% 32];
  }
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int v = 0; v < WARPS; ++v) total += block_loss[v];
    partial_loss[blockIdx.x] = total;
  }
  if (threadIdx.x < K) {
    unsigned long long total = 0;
    for (int v = 0; v < WARPS; ++v) total += block_clipped[v][threadIdx.x];
    partial_clipped[(long long)blockIdx.x * K + threadIdx.x] = total;
  }
}
"""


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
def _kernel(type_name: str, lanes: int, norms: int, group: int, warps: int, rows_per_warp: int) -> Any:
    import cupy

    name = f"glm_fused<{type_name}, {lanes}, {norms}, {group}>"
    source = _SOURCE % {"warps": warps, "rows_per_warp": rows_per_warp}
    module = cupy.RawModule(code=source, options=("-std=c++17",), name_expressions=(name,))
    return module.get_function(name)


def launch_fused(
    X: Any,
    y: Any,
    params: np.ndarray,
    clip_norms: np.ndarray,
    loss_kind: int,
    previous: np.ndarray | None = None,
    weight: float = 1.0,
    previous_weight: float = 0.0,
    statistic_kind: int = -1,
    launch: Launch = Launch(),
) -> tuple[Any, Any, Any, Any]:
    """Queue the kernel; returns the device arrays (partial sums, partial losses, partial clip counts,
    per-row values) without waiting for it (``collect`` reduces them).

    ``X`` is a C-contiguous CuPy block (float32 or float64), ``y`` its float64 labels on the device.
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
                np.int32(loss_kind),
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
