"""A durable training job run as a separate process by the fault tests:

python -m tests.durability.job CHECKPOINT_DIR LEDGER_DIR RUN_ID OUT.npy [--sleep S] [--fsize-limit-after STEP]
"""

from __future__ import annotations

import argparse
import resource
import signal
import time

import numpy as np

from dpstream.algorithms import DPSGD
from dpstream.checkpoint import CheckpointPolicy
from dpstream.coordinator import InMemoryExecutor, run
from dpstream.models import LinearRegressionModel
from dpstream.noise import make_noise_process
from dpstream.privacy import Ledger, LifetimeBudget

ROWS, DIM = 60_000, 8


def data():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((ROWS, DIM))
    return X, X @ np.linspace(-1, 1, DIM) + rng.standard_normal(ROWS)


def algorithm():
    return DPSGD(
        1.0,
        1e-6,
        clip_norm=3.0,
        learning_rate=0.5,
        batch_size=200,
        noise=make_noise_process("lambda", correlation=0.5),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoints")
    parser.add_argument("ledger")
    parser.add_argument("run_id")
    parser.add_argument("out")
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--fsize-limit-after", type=int, default=None)
    args = parser.parse_args()

    def on_step(step, state):
        if args.sleep:
            time.sleep(args.sleep)
        if args.fsize_limit_after is not None and step + 1 == args.fsize_limit_after:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a full disk: writes fail with EFBIG
            resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))

    X, y = data()
    lake = Ledger(args.ledger).lake("job-lake", LifetimeBudget(10.0, 1e-6))
    result = run(
        algorithm(),
        InMemoryExecutor(LinearRegressionModel(), [(X, y)]),
        num_rows=ROWS,
        num_params=DIM,
        initial_params=np.zeros(DIM),
        checkpoint=CheckpointPolicy(args.checkpoints, every_steps=1, retries=2, backoff_seconds=0.05),
        run_id=args.run_id,
        ledger=lake,
        on_step=on_step,
    )
    np.save(args.out, result.params)
    print(result.report.to_markdown())


if __name__ == "__main__":
    main()
