"""``python -m otel_valgen.cli``: the ``otel-valgen`` command."""

from otel_valgen.cli import main

main()
