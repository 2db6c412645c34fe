#!/usr/bin/env bash
# Build the two dpstream images (infra/docker/Dockerfile: the flow pod's, the default target, and the
# scheduler's and workers', target `worker`) and run every role each is meant for, as the shipped
# manifests run them:
#   1. `dpstream --help` and `dpstream demo` (the flow's entry points) in the flow image as user 10001;
#   2. `dask scheduler` and a worker started with the `dask-worker` wrapper (the command KubeCluster's
#      pods run), each in its own container of the worker image;
#   3. a small `dpstream train`, `validate` and `predict` in flow-image containers attached to that
#      scheduler by address, on a lake shared by a host folder mounted at the same path in all of them;
#      then a `train` on a Delta table of the same rows;
# then prints both images' sizes. Not part of `make test` (it needs a container engine and ~5 minutes).
#
#   infra/check-image.sh                 # podman, else docker; IMAGE=dpstream:check, dpstream-worker:check
#   BUILDER=docker IMAGE=dpstream:1.0 WORKER_IMAGE=dpstream-worker:1.0 BUILD_FLAGS=--pull=never infra/check-image.sh
#
# Exits 0 with "skipped: <reason>" where no builder is installed or its engine cannot be reached.
set -euo pipefail

BUILDER=${BUILDER:-$(command -v podman || command -v docker || true)}
IMAGE=${IMAGE:-dpstream:check}
WORKER_IMAGE=${WORKER_IMAGE:-dpstream-worker:check}
BUILD_FLAGS=${BUILD_FLAGS:-}
PORT=${PORT:-18786}
if [[ -z "$BUILDER" ]]; then
    echo "check-image: skipped: neither podman nor docker is installed"
    exit 0
fi
if ! "$BUILDER" info >/dev/null 2>&1; then
    echo "check-image: skipped: $BUILDER is installed but cannot reach its engine ($BUILDER info fails)"
    exit 0
fi

cd "$(dirname "$0")/.."
shared=$(mktemp -d /tmp/dpstream-check-image.XXXXXX)
chmod 0777 "$shared"  # the containers run as uid 10001
containers=()
cleanup() {
    for name in ${containers[@]+"${containers[@]}"}; do "$BUILDER" rm -f "$name" >/dev/null 2>&1 || true; done
    rm -rf "$shared"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
run() { "$BUILDER" run --rm --network host -v "$shared:$shared" -w "$shared" "$IMAGE" "$@"; }

step "build $IMAGE and $WORKER_IMAGE with $BUILDER"
# shellcheck disable=SC2086  # BUILD_FLAGS holds several flags
"$BUILDER" build $BUILD_FLAGS -f infra/docker/Dockerfile -t "$IMAGE" .
# shellcheck disable=SC2086
"$BUILDER" build $BUILD_FLAGS -f infra/docker/Dockerfile --target worker -t "$WORKER_IMAGE" .

step "dpstream --help"
run dpstream --help >/dev/null
test "$(run id -u)" = 10001

# KubeCluster (dask-kubernetes' operator) runs without the Kubernetes clients, whose bytecode the image leaves out.
run python -c 'import sys, dask_kubernetes.operator; assert not {"kubernetes", "kubernetes_asyncio"} & set(sys.modules)'

step "dpstream demo"
run dpstream demo --rows 40000 --files 4 --quiet --directory "$shared/demo"
config=$(ls "$shared"/demo/*/pipeline.toml)

step "dask scheduler and a dask-worker (KubeCluster's command) in their own containers of $WORKER_IMAGE"
test "$("$BUILDER" run --rm "$WORKER_IMAGE" id -u)" = 10001
# No Prefect and no deltalake in the worker image (the check exits 1 where either is found).
"$BUILDER" run --rm "$WORKER_IMAGE" python -c \
    'import importlib.util as u, sys; sys.exit(1 if u.find_spec("prefect") or u.find_spec("deltalake") else 0)'
# Numba's JIT (llvmlite) works there: the preprocessing loop the workers run is compiled.
"$BUILDER" run --rm "$WORKER_IMAGE" python -c \
    'from dpstream.pipelines.preprocessing.range_map import compile_all; compile_all()'
suffix=$$
containers+=("dpstream-check-scheduler-$suffix" "dpstream-check-worker-$suffix")
"$BUILDER" run -d --name "dpstream-check-scheduler-$suffix" --network host "$WORKER_IMAGE" \
    dask scheduler --host 127.0.0.1 --port "$PORT" --no-dashboard >/dev/null
"$BUILDER" run -d --name "dpstream-check-worker-$suffix" --network host -v "$shared:$shared" "$WORKER_IMAGE" \
    dask-worker "tcp://127.0.0.1:$PORT" --nthreads 1 --memory-limit 1GiB --no-dashboard >/dev/null

step "dpstream train against tcp://127.0.0.1:$PORT"
# prepare_on = "workers": validation and the shuffle run as tasks on the worker image too (with an
# address they run in the flow's process by default).
sed -i "s|^n_workers = 2$|address = \"tcp://127.0.0.1:$PORT\"\nworker_timeout = 120\nprepare_on = \"workers\"|" "$config"
grep -qx "address = \"tcp://127.0.0.1:$PORT\"" "$config" # else the train would start a LocalCluster of its own
run dpstream train "$config" --quiet --output "$shared/published"
test -s "$shared/published/model.json"
# The worker did join. Its log is read whole first: `logs | grep -q` under pipefail failed with SIGPIPE
# (exit 141) whenever grep stopped at the match before a long log was written out.
worker_log=$("$BUILDER" logs "dpstream-check-worker-$suffix" 2>&1)
grep -q "Registered to" <<<"$worker_log"

step "dpstream validate and dpstream predict on the same workers"
run dpstream validate "$config" --quiet
run dpstream predict "$shared/published/model.json" "$(dirname "$config")/raw" "$shared/predictions" \
    --quiet --scheduler "tcp://127.0.0.1:$PORT"
ls "$shared"/predictions/*.parquet >/dev/null

step "a Delta table (written in the flow image) validated, trained on and scored by the same workers"
# The flow pod pins the table's version and lists its files (deltalake); the workers read those files
# as Parquet, so the worker image carries no deltalake.
run python -c 'import sys, pyarrow.dataset as ds, deltalake; deltalake.write_deltalake(sys.argv[2], ds.dataset(sys.argv[1]).to_table())' \
    "$(dirname "$config")/raw" "$shared/delta"
sed -e "s|^url = .*|url = \"$shared/delta\"|" -e "s|^shuffled_url = .*|shuffled_url = \"$shared/delta-shuffled\"|" \
    "$config" > "$shared/delta.toml"
run dpstream train "$shared/delta.toml" --quiet --output "$shared/published-delta"
test -s "$shared/published-delta/model.json"
run dpstream predict "$shared/published-delta/model.json" "$shared/delta" "$shared/predictions-delta" \
    --quiet --scheduler "tcp://127.0.0.1:$PORT"
ls "$shared"/predictions-delta/*.parquet >/dev/null

step "sizes"
size() { "$BUILDER" image inspect "$1" --format '{{.Size}}'; }
flow_size=$(size "$IMAGE")
worker_size=$(size "$WORKER_IMAGE")
echo "check-image: ok: $IMAGE (flow pod) is $((flow_size / 1000000)) MB ($flow_size bytes); $WORKER_IMAGE (scheduler and workers) is $((worker_size / 1000000)) MB ($worker_size bytes)"
