# Test and demo environment (sourced by the Makefile and .ci/run).
# Prefect: an isolated home per shell, the ephemeral API, no telemetry, and a generous start-up timeout
# (its 20 s default counts only the sleeps; a fresh ephemeral server took 12-16 s on an idle 2-core machine).
# The temporary homes this file creates are removed when the sourcing shell exits (a make recipe line,
# .ci/run); homes the caller set are the caller's and stay.
_dpstream_created=""
if [ -z "${PREFECT_HOME:-}" ]; then
  PREFECT_HOME="$(mktemp -d "${TMPDIR:-/tmp}/prefect-home.XXXXXX")"
  _dpstream_created="$PREFECT_HOME"
fi
export PREFECT_HOME
# dpstream's temporary Prefect servers keep their database apart from PREFECT_HOME (flows/prefect_api.py);
# under this shell's home, so a test run leaves nothing behind.
export DPSTREAM_PREFECT_HOME="${DPSTREAM_PREFECT_HOME:-$PREFECT_HOME/dpstream-server}"
unset PREFECT_API_URL PREFECT_API_KEY PREFECT_PROFILE
export PREFECT_SERVER_EPHEMERAL_ENABLED=true
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export DO_NOT_TRACK=1
export PREFECT_SERVER_UI_ENABLED=false
export PREFECT_LOGGING_LEVEL=WARNING
# S3 is a moto server on 127.0.0.1 started by the tests; never real AWS.
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-testing}"
export AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-testing}"
export AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}"
export AWS_EC2_METADATA_DISABLED=true
# Dask scratch (p2p shuffle shards, spill) under a per-run temporary directory.
if [ -z "${DASK_TEMPORARY_DIRECTORY:-}" ]; then
  DASK_TEMPORARY_DIRECTORY="$(mktemp -d "${TMPDIR:-/tmp}/dask-scratch.XXXXXX")"
  _dpstream_created="$_dpstream_created $DASK_TEMPORARY_DIRECTORY"
fi
export DASK_TEMPORARY_DIRECTORY
if [ -n "$_dpstream_created" ]; then
  # shellcheck disable=SC2064 # expand now: the trap removes exactly the folders created above
  trap "rm -rf $_dpstream_created" EXIT
fi
