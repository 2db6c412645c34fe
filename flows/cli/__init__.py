"""The ``dpstream`` command line."""
