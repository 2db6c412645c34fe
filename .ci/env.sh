# Test and demo environment from ../shared/spec/stack.md (sourced by the Makefile and .ci/run).
# Prefect: an isolated home per shell, the ephemeral API, no telemetry, a generous start-up timeout.
export PREFECT_HOME="${PREFECT_HOME:-$(mktemp -d "${TMPDIR:-/tmp}/prefect-home.XXXXXX")}"
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
export DASK_TEMPORARY_DIRECTORY="${DASK_TEMPORARY_DIRECTORY:-$(mktemp -d "${TMPDIR:-/tmp}/dask-scratch.XXXXXX")}"
