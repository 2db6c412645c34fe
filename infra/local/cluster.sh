#!/usr/bin/env bash
# A Dask scheduler and N worker processes on this machine, on loopback, for `[cluster] address`.
#
#   infra/local/cluster.sh 4                  # 4 single-threaded workers, 2 GiB each
#   WORKER_MEMORY=4GiB infra/local/cluster.sh 2
#
# Then set `address = "tcp://127.0.0.1:8786"` in the pipeline config's [cluster] section. Ctrl-C stops
# the scheduler and every worker (nothing is left running).
set -euo pipefail

workers="${1:-2}"
port="${DASK_SCHEDULER_PORT:-8786}"
memory="${WORKER_MEMORY:-2GiB}"
bin="$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin"
if [[ ! -x "$bin/dask" ]]; then
    echo "cluster.sh: $bin/dask not found; run \`make install\` first" >&2
    exit 2
fi
if ! [[ "$workers" =~ ^[1-9][0-9]*$ ]]; then
    echo "cluster.sh: the worker count must be a positive integer, got '$workers'" >&2
    exit 2
fi

pids=()
alive() {
    local pid
    for pid in "$@"; do
        kill -0 "$pid" 2>/dev/null && return 0
    done
    return 1
}
stop() {  # SIGTERM, then SIGKILL after a grace period: a worker waiting on a gone scheduler must not linger
    kill -TERM "$@" 2>/dev/null || true
    for _ in $(seq 40); do
        alive "$@" || return 0
        sleep 0.25
    done
    kill -KILL "$@" 2>/dev/null || true
}
cleanup() {
    trap - EXIT INT TERM
    if ((${#pids[@]} > 1)); then
        stop "${pids[@]:1}"  # the workers first, while the scheduler can still take their goodbye
    fi
    if ((${#pids[@]} > 0)); then
        stop "${pids[0]}"
    fi
    wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

"$bin/dask" scheduler --host 127.0.0.1 --port "$port" --dashboard-address 127.0.0.1:0 &
pids+=($!)
for _ in $(seq "$workers"); do
    "$bin/dask" worker "tcp://127.0.0.1:$port" --host 127.0.0.1 --nthreads 1 --nworkers 1 \
        --memory-limit "$memory" --dashboard-address 127.0.0.1:0 &
    pids+=($!)
done
echo "scheduler tcp://127.0.0.1:$port with $workers worker(s); Ctrl-C stops them" >&2
wait -n "${pids[@]}"
