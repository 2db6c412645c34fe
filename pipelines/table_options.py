"""One set of storage options for every reader of a table: fsspec's (s3fs) spelling translated to the
options ``deltalake`` (object_store) and ``pyiceberg`` (its FileIO) read.

The config's ``lake.storage_options`` are fsspec's (``key``, ``secret``, ``token``,
``client_kwargs.endpoint_url``, ``client_kwargs.region_name``, ``endpoint_url``); the environment's
``AWS_*`` variables (``AWS_ENDPOINT_URL`` among them) apply where the options are silent, as they do for
s3fs.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["delta_storage_options", "iceberg_properties"]


def _s3_settings(storage_options: dict[str, Any]) -> dict[str, str]:
    """(key, secret, token, endpoint, region) from fsspec's options, then the environment."""
    client = dict(storage_options.get("client_kwargs") or {})
    found = {
        "key": storage_options.get("key") or os.environ.get("AWS_ACCESS_KEY_ID"),
        "secret": storage_options.get("secret") or os.environ.get("AWS_SECRET_ACCESS_KEY"),
        "token": storage_options.get("token") or os.environ.get("AWS_SESSION_TOKEN"),
        "endpoint": client.get("endpoint_url")
        or storage_options.get("endpoint_url")
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL"),
        "region": client.get("region_name")
        or os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION"),
    }
    return {name: str(value) for name, value in found.items() if value}


def delta_storage_options(url: str, storage_options: dict[str, Any]) -> dict[str, str] | None:
    """``deltalake``'s ``storage_options`` for the table at ``url`` (None on a local path)."""
    if not str(url).startswith(("s3://", "s3a://")):
        return None
    settings = _s3_settings(storage_options)
    names = {
        "key": "AWS_ACCESS_KEY_ID",
        "secret": "AWS_SECRET_ACCESS_KEY",
        "token": "AWS_SESSION_TOKEN",
        "endpoint": "AWS_ENDPOINT_URL",
        "region": "AWS_REGION",
    }
    options = {names[name]: value for name, value in settings.items()}
    if settings.get("endpoint", "").startswith("http://"):
        options["AWS_ALLOW_HTTP"] = "true"  # a test or on-premises endpoint without TLS
    return options


def iceberg_properties(url: str, storage_options: dict[str, Any]) -> dict[str, str]:
    """``pyiceberg`` FileIO properties for a table at ``url`` (none on a local path)."""
    if not str(url).startswith(("s3://", "s3a://")):
        return {}
    settings = _s3_settings(storage_options)
    names = {
        "key": "s3.access-key-id",
        "secret": "s3.secret-access-key",
        "token": "s3.session-token",
        "endpoint": "s3.endpoint",
        "region": "s3.region",
    }
    return {names[name]: value for name, value in settings.items()}
