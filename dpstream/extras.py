"""The optional parts of dpstream and the extra that installs each (pyproject.toml's
``[project.optional-dependencies]``): a feature whose library is missing says which extra to install.

``make demo`` installs the runtime alone (requirements-runtime.lock); S3, Delta Lake and Iceberg tables,
a Kubernetes cluster, the GPU backend and the PLD accountant each come with an extra.
"""

from __future__ import annotations

__all__ = ["EXTRAS", "MissingExtra", "missing_extra"]

# Top-level module → (the extra that installs it, what needs it).
EXTRAS: dict[str, tuple[str, str]] = {
    "s3fs": ("s3", "an s3:// location"),
    "deltalake": ("delta", "a Delta Lake table"),
    "pyiceberg": ("iceberg", "an Iceberg table"),
    "dask_kubernetes": ("kubernetes", "a Dask cluster on Kubernetes"),
    "kubernetes": ("kubernetes", "a Dask cluster on Kubernetes"),
    "dp_accounting": ("accounting", "the PLD accountant (PldAccountant)"),
    "cupy": ("gpu", "the GPU backend"),
    "cupyx": ("gpu", "the GPU backend"),
}


class MissingExtra(ImportError):
    """A feature's library is not installed; the message names the extra that installs it."""


def missing_extra(error: ImportError, module: str | None = None) -> MissingExtra | None:
    """``error`` restated as the extra to install, where the missing module (``error.name``, or
    ``module`` where the importer did not set it, as fsspec does for s3fs) belongs to one; else None."""
    name = (error.name or module or "").split(".")[0]
    if name not in EXTRAS:
        return None
    extra, feature = EXTRAS[name]
    return MissingExtra(
        f"{feature} needs the {extra!r} extra, which is not installed ({name} is missing): "
        f"pip install 'dpstream[{extra}]' (in this repository: .venv/bin/uv pip install -e '.[{extra}]')",
        name=name,
    )
