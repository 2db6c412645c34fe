"""The fused GLM kernel's CUDA C++ source (``dpstream.models.glm_cuda`` compiles and launches it). PRIVACY-CRITICAL
(the kernel clips).

``kernel_source`` fills the template with the launch constants and one declared loss
(``dpstream.models.losses``): the loss's ``cuda`` statements become the body of the device function
``derivative_and_loss`` and its ``cuda_label`` the label it reads, so the kernel never branches on the
loss and a new loss needs no edit here. The template's own ``%`` signs are written ``%%``.
"""

from __future__ import annotations

from dpstream.models.losses.base import LossDeclaration

__all__ = ["kernel_source"]

_TEMPLATE = r"""
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

// phi'(m, y), with phi(m, y) stored in *loss: the declared loss %(loss_name)s (dpstream.models.losses).
__device__ __forceinline__ double derivative_and_loss(double margin, double label, double* loss) {%(loss_body)s
}

// The label the loss reads, from the stored one.
__device__ __forceinline__ double loss_label(double label) { return %(loss_label)s; }

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
    const double* __restrict__ clip_norms, int K, int statistic_kind, double* __restrict__ values,
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
    const double label = loss_label(row < n ? y[row] : 0.0);
    double loss, unused;
    double scalar = derivative_and_loss(margin, label, &loss);
    if (combine == 2) {
      const double previous_scalar = derivative_and_loss(margin_previous, label, &unused);
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


def kernel_source(loss: LossDeclaration, warps: int, rows_per_warp: int) -> str:
    """The kernel's source for ``loss`` with ``warps`` warps per thread block, each summing at most
    ``rows_per_warp`` rows."""
    return _TEMPLATE % {
        "warps": warps,
        "rows_per_warp": rows_per_warp,
        "loss_name": loss.name,
        "loss_body": loss.cuda,
        "loss_label": loss.cuda_label,
    }
