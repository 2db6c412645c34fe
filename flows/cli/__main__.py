"""``python -m dpstream.flows.cli``: the ``dpstream`` command."""

from dpstream.flows.cli.main import run

if __name__ == "__main__":
    run()
