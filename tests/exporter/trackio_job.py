"""Trackio's side of the Trackio tests, each in a process of its own (Trackio reads TRACKIO_DIR on import).

``python trackio_job.py trainer OUT.json``: verl 0.9.1's Trackio tracking starts the run.
``python trackio_job.py read PROJECT NAME``: prints what the store holds, as JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def trainer(out: str) -> None:
    """Start verl's Trackio tracking, log a scalar, record what names the run, finish."""
    from verl.utils.tracking import Tracking

    tracking = Tracking(project_name="valgen-proj", experiment_name="grpo", default_backend=["trackio"], config={})
    tracking.log({"train/loss": 1.0}, step=1)
    from otel_valgen._identity import tracker_resource

    resource = tracker_resource("generated")
    tracking.finish()
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(resource, handle)


def read(project: str, name: str) -> None:
    """Print the run's logged rows (tables as their rows) and its traces, with Trackio's own storage API."""
    from trackio.sqlite_storage import SQLiteStorage

    def plain(value: Any) -> Any:
        if isinstance(value, dict) and value.get("_type") == "trackio.table":
            return value["_value"]
        return value

    logs = [{key: plain(value) for key, value in row.items()} for row in SQLiteStorage.get_logs(project, name)]
    traces = [
        {"step": t["step"], "messages": t["messages"], "metadata": t["metadata"]}
        for t in SQLiteStorage.get_traces(project, name)
    ]
    print(json.dumps({"logs": logs, "traces": traces, "runs": SQLiteStorage.get_run_records(project)}, default=str))


if __name__ == "__main__":
    if sys.argv[1] == "trainer":
        trainer(sys.argv[2])
    else:
        read(sys.argv[2], sys.argv[3])
