"""Querying as the dashboard does: the variable values Grafana substitutes into a panel's query."""

from __future__ import annotations

from tests.deploy.steps import Job

# What Grafana puts for $__range in an instant query over the default time range is a duration;
# the evaluator ignores time, so any valid duration does.
RANGE = "1h"
# The dashboard's variables that a user leaves at their default (everything), as Grafana fills them in.
DEFAULTS = {"data_source": ".*", "trajectory": ""}


def substitute(expr: str, **values: str) -> str:
    """The query as Grafana sends it for the given variable values (the others at their defaults)."""
    values = {**DEFAULTS, **values}
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(f"${name}", values[name])
    return expr.replace("$__range", RANGE)


def variables(job: Job, **overrides: str) -> dict[str, str]:
    """Variable values selecting the job's run (and all steps, prompts and data sources unless overridden)."""
    return {"service": job.service, "run": job.run_id, "step": ".+", "sample": ".+", "data_source": ".*", **overrides}
