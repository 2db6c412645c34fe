"""Tuning sweep of the fused GLM kernel (``dpstream.models.glm_cuda``) on one GPU.

For a resident float32 block (4,194,304 × 64) it times, with CUDA events (median of 10):

* the references: a device-to-device copy of X (bytes read per second) and cuBLAS ``X.T @ (X @ w)``;
* the kernel alone for each launch shape (rows per warp step, warps per block, rows per warp), with its
  registers and spilled bytes per thread;
* the whole call, ``collect(launch_fused(...))`` (kernel, the partial sums' reduction, the copy back).

Reports bytes of X read per second as a fraction of the copy's and of the device's peak. Run on a
GPU machine: ``python -m benchmarks.gpu_glm_kernel`` (``make bench-gpu`` runs it too).
"""

from __future__ import annotations

import itertools

import numpy as np

from dpstream.models.losses.base import declared_loss

ROWS, DIM = 4_194_304, 64


def _event_median(function, repeats: int = 10) -> float:
    import cupy

    function()
    times = []
    for _ in range(repeats):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        function()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return float(np.median(times))


def main() -> list[str]:
    import cupy

    from benchmarks.gpu_speed import device_report
    from dpstream.models import glm_cuda

    name, peak = device_report()
    rng = np.random.default_rng(0)
    X = cupy.asarray(rng.standard_normal((ROWS, DIM)).astype(np.float32))
    y = cupy.asarray(rng.standard_normal(ROWS))
    w = rng.standard_normal(DIM) * 0.1
    w_device = cupy.asarray(w.astype(np.float32))
    copy_target = cupy.empty_like(X)
    bytes_of_x = X.nbytes
    copy_rate = bytes_of_x / _event_median(lambda: cupy.copyto(copy_target, X))
    cublas_rate = bytes_of_x / _event_median(lambda: X.T @ (X @ w_device))
    lines = [
        f"Fused GLM kernel sweep on {name}: X {ROWS:,} × {DIM} float32 ({bytes_of_x / 1e9:.2f} GB), peak {peak / 1e12:.2f} TB/s",
        (
            f"device copy reads X at {copy_rate / 1e9:,.0f} GB/s ({copy_rate / peak:.2f} of peak); "
            f"cuBLAS X.T@(X@w) {cublas_rate / 1e9:,.0f} GB/s of X"
        ),
        "",
        "| clip norms | group | warps/block | rows/warp | registers | spilled bytes | kernel GB/s of X "
        "| of peak | of copy | sums equal default's |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    best = {}
    for norms in (1, 31):
        clip_norms = np.geomspace(0.01, 100.0, norms)
        lanes, kmax, default_group = glm_cuda._shape(DIM, norms, np.float32)
        reference = glm_cuda.collect(glm_cuda.launch_fused(X, y, w, clip_norms, "squared"))[0].ravel()
        for group, warps, rows_per_warp in itertools.product((4, 8, 16), (4, 8), (512,)):
            launch = glm_cuda.Launch(warps_per_block=warps, rows_per_warp=rows_per_warp, group=group)
            try:
                rate = bytes_of_x / _event_median(
                    lambda c=clip_norms, s=launch: glm_cuda.launch_fused(X, y, w, c, "squared", launch=s)
                )
            except Exception as error:  # noqa: BLE001 - a shape that does not compile or launch: recorded, not fatal
                lines.append(
                    f"| {norms} | {group} | {warps} | {rows_per_warp} | - | - | failed: {type(error).__name__} | | |"
                )
                continue
            sums = glm_cuda.launch_fused(X, y, w, clip_norms, "squared", launch=launch)[0].sum(axis=0).get()
            equal = bool(np.allclose(sums, reference, rtol=1e-5, atol=1e-5 * np.abs(reference).max()))
            kernel = glm_cuda._kernel(
                declared_loss("squared"), "float", lanes, kmax, group, warps, rows_per_warp
            )
            registers, spilled = getattr(kernel, "num_regs", "?"), getattr(kernel, "local_size_bytes", "?")
            best[norms] = max(best.get(norms, (0.0, None)), (rate, launch), key=lambda item: item[0])
            lines.append(
                f"| {norms} | {group} | {warps} | {rows_per_warp} | {registers} | {spilled} | {rate / 1e9:,.0f} | "
                f"{rate / peak:.3f} | {rate / copy_rate:.2f} | {'yes' if equal else 'NO'} |"
            )
        whole = bytes_of_x / _event_median(
            lambda c=clip_norms: glm_cuda.collect(glm_cuda.launch_fused(X, y, w, c, "squared"))
        )
        lines.append(
            f"| {norms} | default ({default_group}, {glm_cuda.WARPS_PER_BLOCK}, {glm_cuda.ROWS_PER_WARP}) whole call "
            f"| | | | | {whole / 1e9:,.0f} | {whole / peak:.3f} | {whole / copy_rate:.2f} |"
        )
    lines.append("")
    for norms, (rate, launch) in best.items():
        lines.append(f"best for {norms} clip norm(s): {launch} at {rate / peak:.3f} of peak")
    print("\n".join(lines), flush=True)
    return lines


if __name__ == "__main__":
    main()
