"""The config file itself: where it is, how it is read, and the error that names it.

A config's relative local locations are taken relative to the config file's folder (``config_folder``),
so a pipeline directory can be moved or checked in (as with prefect.yaml); the file may also be read
from any fsspec URL (``s3://bucket/jobs/pipeline.toml``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dpstream.storage import open_url

__all__ = [
    "ConfigError",
    "LOCATION_KEYS",
    "is_remote",
    "config_folder",
    "anchor_locations",
    "read_config_text",
]


class ConfigError(ValueError):
    """The config file is unreadable or invalid; the message names the key path and the fix."""


# Locations a config names, anchored to its folder when relative (anchor_locations).
LOCATION_KEYS = (("lake", "url"), ("lake", "shuffled_url"), ("budget", "ledger_url"), ("checkpoint", "url"))


def is_remote(path: str | Path) -> bool:
    """True for a URL of another filesystem (s3://, gs://, ...); a plain path or file:// is local."""
    text = str(path)
    return "://" in text and not text.startswith("file://")


def config_folder(path: str | Path) -> str:
    """The folder a config's relative locations (and its default ``runs/``) are anchored to: the file's
    folder on disk, or its URL's parent (``s3://bucket/jobs/pipeline.toml`` → ``s3://bucket/jobs``)."""
    if is_remote(path):
        return str(path).rsplit("/", 1)[0]
    return str(Path(str(path).removeprefix("file://")).resolve().parent)


def anchor_locations(document: dict[str, Any], folder: str) -> None:
    """Rewrite, in the parsed TOML ``document``, each relative local location of ``LOCATION_KEYS`` as a
    location under ``folder``."""
    for section, key in LOCATION_KEYS:
        value = document.get(section, {}).get(key) if isinstance(document.get(section), dict) else None
        if isinstance(value, str) and value and "://" not in value and not Path(value).is_absolute():
            document[section][key] = f"{folder}/{value}" if is_remote(folder) else str(Path(folder) / value)


def read_config_text(path: str | Path) -> str:
    """The config file's text, from disk or any fsspec URL (credentials and endpoint from the
    environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL for S3)."""
    if not is_remote(path):
        return Path(str(path).removeprefix("file://")).read_text(encoding="utf-8")
    try:
        fs, location = open_url(str(path))
        with fs.open(location, "rb") as handle:
            return handle.read().decode("utf-8")
    except FileNotFoundError:
        raise
    except OSError as error:
        raise ConfigError(
            f"{path}: cannot read the config ({type(error).__name__}: {error}); check the URL, the credentials "
            "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and the endpoint (AWS_ENDPOINT_URL)"
        ) from None
