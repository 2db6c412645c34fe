"""Dask data plane (lakes, validation, shuffle-once, distributed step executor). Built in issue 4."""
