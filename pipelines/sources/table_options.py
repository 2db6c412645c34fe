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


# What each library calls (key, secret, token, endpoint, region).
_DELTA_NAMES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_REGION",
)
_ICEBERG_NAMES = ("s3.access-key-id", "s3.secret-access-key", "s3.session-token", "s3.endpoint", "s3.region")
_SETTINGS = ("key", "secret", "token", "endpoint", "region")


def _named(url: str, storage_options: dict[str, Any], names: tuple[str, ...]) -> dict[str, str] | None:
    """The S3 settings for ``url`` under a library's ``names`` (None when ``url`` is not on S3)."""
    if not str(url).startswith(("s3://", "s3a://")):
        return None
    settings = _s3_settings(storage_options)
    return {names[_SETTINGS.index(name)]: value for name, value in settings.items()}


def delta_storage_options(url: str, storage_options: dict[str, Any]) -> dict[str, str] | None:
    """``deltalake``'s ``storage_options`` for the table at ``url`` (None on a local path)."""
    options = _named(url, storage_options, _DELTA_NAMES)
    if options is not None and options.get("AWS_ENDPOINT_URL", "").startswith("http://"):
        options["AWS_ALLOW_HTTP"] = "true"  # a test or on-premises endpoint without TLS
    return options


def iceberg_properties(url: str, storage_options: dict[str, Any]) -> dict[str, str]:
    """``pyiceberg`` FileIO properties for a table at ``url`` (none on a local path)."""
    return _named(url, storage_options, _ICEBERG_NAMES) or {}
