"""Execution on a Dask cluster: connecting or starting one (local, Kubernetes), the step executor and
its step servers, streaming of blocks, training and scoring a lake, and bounded waits."""
