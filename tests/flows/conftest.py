"""The flows tests' Prefect API: the ephemeral test harness, one per test module."""

import pytest


@pytest.fixture(scope="module")
def prefect_api():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="module")
def cli_prefect_api():
    """One Prefect API server (dpstream.flows.prefect_api) for the CLI subprocesses of a module: each `dpstream
    train` then reports to it instead of starting a temporary server of its own (6-12 s each on 2 cores).
    The own-server path is covered where it matters (test_single_pass_cli's killed train, test_newcomer)."""
    import os

    from dpstream.flows.prefect_api import prefect_api

    with prefect_api() as url:
        os.environ["PREFECT_API_URL"] = url
        try:
            yield url
        finally:
            os.environ.pop("PREFECT_API_URL", None)
