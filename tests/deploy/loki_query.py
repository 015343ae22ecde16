"""Querying Loki as the dashboard does: variable substitution and a client of Loki's HTTP API."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.deploy import harness, loki_model
from tests.deploy.steps import Job

LOKI_BIN = harness.TOOLS / "loki"
# Building Loki on an empty Go cache takes 3-6 min on 2 cores; a test waits this long at most
# (the cache it fills makes the next attempt quick) and otherwise skips.
BUILD_TIMEOUT_S = 240


def loki_binary() -> Path | None:
    """build/tools/loki, built with install-tools.sh when absent; None when it cannot be had in time."""
    if not LOKI_BIN.is_file():
        try:
            subprocess.run(
                ["bash", "tools/deploy/install-tools.sh", "--loki"],
                cwd=harness.REPO,
                capture_output=True,
                timeout=BUILD_TIMEOUT_S,
                check=True,
            )
        except (subprocess.SubprocessError, OSError):
            return None
    return LOKI_BIN if LOKI_BIN.is_file() else None


def substitute(expr: str, **values: str) -> str:
    """The query as Grafana sends it for the given variable values."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(f"${name}", values[name])
    return expr.replace("$__range", "1h")


def variables(job: Job, **overrides: str) -> dict[str, str]:
    """Variable values selecting the job's run (and all steps and prompts unless overridden)."""
    return {"service": job.service, "run": job.run_id, "step": ".+", "sample": ".+", **overrides}


class LokiBackend:
    """A running Loki's HTTP query API."""

    def __init__(self, job: Job, collector_http: str, base_url: str) -> None:
        self.job = job
        self.collector_http = collector_http
        self.base_url = base_url

    def _get(self, path: str, **params: str) -> dict[str, Any]:
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            data: dict[str, Any] = json.loads(response.read())
        assert data["status"] == "success", data
        return data

    def logs(self, query: str) -> list[dict[str, str]]:
        """query_range over the last hour, as Grafana's logs queries do."""
        now = time.time_ns()
        data = self._get(
            "/loki/api/v1/query_range",
            query=query,
            start=str(now - 3600 * 10**9),
            end=str(now + 60 * 10**9),
            limit="5000",
            direction="backward",
        )
        return [dict(stream["stream"]) for stream in data["data"]["result"] for _ in stream["values"]]

    def metric(self, query: str) -> dict[str, float]:
        """An instant query at now."""
        data = self._get("/loki/api/v1/query", query=query, time=str(time.time_ns()))
        by = query.split("by (", 1)[1].split(")", 1)[0]
        return {sample["metric"].get(by, ""): float(sample["value"][1]) for sample in data["data"]["result"]}

    def label_names(self) -> list[str]:
        """Loki's index label names."""
        return list(self._get("/loki/api/v1/labels")["data"])


def loki_config(workdir: Path) -> Path:
    """docker/loki/loki.yaml with its /loki paths moved under `workdir`."""
    text = loki_model.LOKI_CONFIG.read_text(encoding="utf-8")
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "loki.yaml"
    path.write_text(text.replace("/loki", str(workdir / "data")), encoding="utf-8")
    return path
