"""The flows tests' Prefect API: the ephemeral test harness, one per test module."""

import pytest


@pytest.fixture(scope="module")
def prefect_api():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
