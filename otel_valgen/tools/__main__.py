"""``python -m otel_valgen.tools``: the ``otel-valgen`` command."""

from otel_valgen.tools import main

main()
