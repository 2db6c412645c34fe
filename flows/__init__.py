"""Prefect control plane and the ``dpstream`` CLI."""
