"""Constants of the data plane that the pipeline config reads too: the config
(``dpstream.flows.config``) imports no data-plane module, so the values both need live here, below both.

* ``AUTO_MU``: the μ of the release that chooses a user-level shuffle's ``max_rows_per_user = "auto"``
  (``dpstream.pipelines.shuffle.users``); the config checks that it and one run fit the lifetime budget.
* ``DEFAULT_WORKER_TIMEOUT``: seconds without any worker before a run stops
  (``dpstream.pipelines.waiting``); the default of ``[cluster] worker_timeout``.
"""

from __future__ import annotations

__all__ = ["AUTO_MU", "DEFAULT_WORKER_TIMEOUT"]

# μ of the "auto" bound's release: 0.01 of μ² (a lifetime ε = 4 at δ = 1e-5 is μ ≈ 1.0). Noise std
# √2/0.1 ≈ 14 people per bin: k lands on the true quantile's power of two for most draws from about 500
# people (measured on Zipf and constant panels; `tests/pipelines/test_user_shuffle.py`).
AUTO_MU = 0.1
DEFAULT_WORKER_TIMEOUT = 300.0  # seconds without any worker before a run stops (cluster.worker_timeout)
