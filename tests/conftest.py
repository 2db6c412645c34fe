"""Shared fixtures: a real S3 endpoint (moto server on 127.0.0.1) for storage tests."""

from __future__ import annotations

import os
import uuid

import pytest

# The suite never talks to real AWS: credentials are dummies, instance metadata is off.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
# The CLI's log files (flows/logs.py) go to one folder for the session, removed at its end, not ~/.dpstream.
if "DPSTREAM_LOG_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["DPSTREAM_LOG_DIR"] = tempfile.mkdtemp(prefix="dpstream-test-logs.")
    atexit.register(shutil.rmtree, os.environ["DPSTREAM_LOG_DIR"], True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules holding a test marked ``slow`` run first, each module's tests kept together: with
    ``--maxschedchunk=1`` (the Makefile) pytest-xdist hands tests out one at a time in this order, so the
    long CLI and outage tests start early on whichever worker is free and the short ones fill in around
    them, instead of the long ones forming the tail. Whole modules move, not single tests, so a
    module-scoped fixture (a Prefect API server) starts once per worker rather than again for the
    tests left behind. The order is the same in every worker, as xdist requires (a stable sort)."""
    slow_modules = {item.module for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.module not in slow_modules)


RUNNING_SERVERS: dict = {}  # endpoint -> server, so an outage test can stop and restart it


@pytest.fixture(scope="session")
def s3_server():
    """A moto S3 server bound to loopback for the whole session; stopped at the end."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    RUNNING_SERVERS[endpoint] = server
    try:
        yield endpoint
    finally:
        RUNNING_SERVERS.pop(endpoint).stop()


@pytest.fixture()
def s3_bucket(s3_server):
    """A fresh bucket; returns (s3://bucket, storage_options)."""
    import s3fs

    options = {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": s3_server}}
    name = f"test-{uuid.uuid4().hex[:12]}"
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir(name)
    return f"s3://{name}", options
