"""The ``otel-valgen`` command line (``pip install otel-valgen[cli]``): demo, show, resend, push.

The command-line wing: it uses the library (reading and selecting records) and launches the exporter
service (``otel-valgen exporter``); neither of them imports it.
"""

from __future__ import annotations

import sys


def main() -> None:
    """The ``otel-valgen`` console script: the command, or how to install it when its extra is missing."""
    try:
        from otel_valgen.cli.main import main as run
    except ModuleNotFoundError as error:
        if error.name not in {"click", "rich"}:
            raise
        print(
            f"Error: the otel-valgen command needs {error.name}, which is not installed; "
            "install it: pip install 'otel-valgen[cli]'",
            file=sys.stderr,
        )
        sys.exit(1)
    run()
