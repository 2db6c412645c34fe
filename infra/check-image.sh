#!/usr/bin/env bash
# Build the dpstream image and run every role it is meant for, as the shipped manifests run them:
#   1. `dpstream --help` and `dpstream demo` (the flow's entry points) as the image's user 10001;
#   2. `dask scheduler` and a worker started with the `dask-worker` wrapper (the command KubeCluster's
#      pods run), each in its own container;
#   3. a small `dpstream train` in a third container attached to that scheduler by address, on a lake
#      shared by a host folder mounted at the same path in all three;
# then prints the image's size. Not part of `make test` (it needs a container engine and ~5 minutes).
#
#   infra/check-image.sh                 # podman, else docker; IMAGE=dpstream:check
#   BUILDER=docker IMAGE=dpstream:1.0 BUILD_FLAGS=--pull=never infra/check-image.sh
#
# Exits 0 with "skipped: <reason>" where no builder is installed or its engine cannot be reached.
set -euo pipefail

BUILDER=${BUILDER:-$(command -v podman || command -v docker || true)}
IMAGE=${IMAGE:-dpstream:check}
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
    for name in "${containers[@]}"; do "$BUILDER" rm -f "$name" >/dev/null 2>&1 || true; done
    rm -rf "$shared"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
run() { "$BUILDER" run --rm --network host -v "$shared:$shared" -w "$shared" "$IMAGE" "$@"; }

step "build $IMAGE with $BUILDER"
# shellcheck disable=SC2086  # BUILD_FLAGS holds several flags
"$BUILDER" build $BUILD_FLAGS -f infra/docker/Dockerfile -t "$IMAGE" .

step "dpstream --help"
run dpstream --help >/dev/null
test "$(run id -u)" = 10001

step "dpstream demo"
run dpstream demo --rows 40000 --files 4 --quiet --directory "$shared/demo"
config=$(ls "$shared"/demo/*/pipeline.toml)

step "dask scheduler and a dask-worker (KubeCluster's command) in their own containers"
suffix=$$
containers+=("dpstream-check-scheduler-$suffix" "dpstream-check-worker-$suffix")
"$BUILDER" run -d --name "dpstream-check-scheduler-$suffix" --network host "$IMAGE" \
    dask scheduler --host 127.0.0.1 --port "$PORT" --no-dashboard >/dev/null
"$BUILDER" run -d --name "dpstream-check-worker-$suffix" --network host -v "$shared:$shared" "$IMAGE" \
    dask-worker "tcp://127.0.0.1:$PORT" --nthreads 1 --memory-limit 1GiB --no-dashboard >/dev/null

step "dpstream train against tcp://127.0.0.1:$PORT"
sed -i "s|^n_workers = 2$|address = \"tcp://127.0.0.1:$PORT\"\nworker_timeout = 120|" "$config"
grep -qx "address = \"tcp://127.0.0.1:$PORT\"" "$config" # else the train would start a LocalCluster of its own
run dpstream train "$config" --quiet --output "$shared/published"
test -s "$shared/published/model.json"
# The worker did join. Its log is read whole first: `logs | grep -q` under pipefail failed with SIGPIPE
# (exit 141) whenever grep stopped at the match before a long log was written out.
worker_log=$("$BUILDER" logs "dpstream-check-worker-$suffix" 2>&1)
grep -q "Registered to" <<<"$worker_log"

step "size"
size=$("$BUILDER" image inspect "$IMAGE" --format '{{.Size}}')
echo "check-image: ok: $IMAGE is $((size / 1000000)) MB ($size bytes)"
