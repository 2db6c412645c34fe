"""The ``dpstream`` command line: the dispatcher (``main``), the commands' arguments (light modules) and
one module per command that runs it."""
