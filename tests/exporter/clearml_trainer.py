"""A trainer process as verl 0.9.1 makes one for ClearML: ``Tracking(default_backend=["clearml"])``.

Usage (with CLEARML_OFFLINE_MODE=1, CLEARML_CACHE_DIR and HOME set; test_clearml.py runs a
copy of this file from a folder outside the repository):
    python trainer.py OUT.json
Writes the resource attributes ``otel_valgen`` sends for this job, and the task's offline folder.
"""

from __future__ import annotations

import json
import sys


def main(out: str) -> None:
    """Start verl's ClearML tracking, log a scalar, record what names the run, finish."""
    from verl.utils.tracking import Tracking

    tracking = Tracking(project_name="valgen-proj", experiment_name="grpo", default_backend=["clearml"], config={})
    tracking.log({"train/loss": 1.0}, step=1)
    from clearml import Task

    from otel_valgen._identity import tracker_resource

    task = Task.current_task()
    facts = {"resource": tracker_resource("generated"), "folder": str(task.get_offline_mode_folder())}
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(facts, handle)
    tracking.finish()


if __name__ == "__main__":
    main(sys.argv[1])
