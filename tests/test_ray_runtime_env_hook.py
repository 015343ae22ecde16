"""The Ray env hook (``RAY_RUNTIME_ENV_HOOK``): a job's runtime env gains otel-valgen's, never loses its own."""

from __future__ import annotations

import os

import pytest

from otel_valgen import _process
from otel_valgen import ray as vg_ray


@pytest.fixture(autouse=True)
def _fresh_emitter(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("OTEL_VALGEN_RUN_ID", "hooked-run")
    monkeypatch.setenv("OTEL_VALGEN_DIR", str(tmp_path))
    _process.reset_for_testing()


def test_hook_adds_the_setup_hook_and_settings_and_keeps_the_jobs_env() -> None:
    """A runtime env like verl's (env_vars) keeps its values and gains the setup hook and the resolved run id."""
    job_env = {"env_vars": {"TOKENIZERS_PARALLELISM": "true", "NCCL_DEBUG": "WARN"}}
    merged = vg_ray.runtime_env_hook(job_env)
    assert merged["worker_process_setup_hook"] == "otel_valgen.ray.setup_worker"
    assert merged["env_vars"]["TOKENIZERS_PARALLELISM"] == "true"
    assert merged["env_vars"]["NCCL_DEBUG"] == "WARN"
    assert merged["env_vars"]["OTEL_VALGEN_RUN_ID"] == "hooked-run"
    assert job_env == {"env_vars": {"TOKENIZERS_PARALLELISM": "true", "NCCL_DEBUG": "WARN"}}


def test_hook_takes_no_runtime_env() -> None:
    """ray.init() without a runtime env passes None to the hook."""
    assert vg_ray.runtime_env_hook(None)["worker_process_setup_hook"] == "otel_valgen.ray.setup_worker"


def test_a_failing_hook_returns_the_jobs_env_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any failure inside the hook leaves ray.init with the job's own runtime env."""

    def broken(base: object = None) -> dict[str, object]:
        raise RuntimeError("boom")

    monkeypatch.setattr(vg_ray, "runtime_env", broken)
    assert vg_ray.runtime_env_hook({"env_vars": {"A": "1"}}) == {"env_vars": {"A": "1"}}


@pytest.mark.parametrize(
    "variables",
    [
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/base/"},
        {"OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://c:4318/custom", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:1"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
    ],
)
def test_a_worker_resolves_the_drivers_endpoint(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str]) -> None:
    """What the driver forwards makes a worker send where the driver sends, with its protocol."""
    from otel_valgen._settings import resolve_settings

    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    driver = resolve_settings()
    forwarded = vg_ray.worker_env()
    for name in variables:
        monkeypatch.delenv(name)
    for name, value in forwarded.items():
        monkeypatch.setenv(name, value)
    worker = resolve_settings()
    assert (worker.endpoint, worker.protocol) == (driver.endpoint, driver.protocol)


def test_a_jobs_own_setup_hook_is_chained_and_the_variable_ray_checks_agrees() -> None:
    """A job submitted with its own hook: ours replaces it in both places Ray reads, and the job's is chained."""
    job_env = {
        "worker_process_setup_hook": "my_project.setup",
        "env_vars": {"__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR": "my_project.setup"},  # what job submission sets
    }
    merged = vg_ray.runtime_env_hook(job_env)
    assert merged["worker_process_setup_hook"] == "otel_valgen.ray.setup_worker"
    assert merged["env_vars"]["__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"] == "otel_valgen.ray.setup_worker"
    assert merged["env_vars"]["OTEL_VALGEN_CHAINED_SETUP_HOOK"] == "my_project.setup"


def test_setup_worker_runs_the_chained_hook_first_and_raises_its_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The chained hook runs in the worker before otel-valgen's; its failure fails the worker as without us."""
    monkeypatch.setenv("OTEL_VALGEN_CHAINED_SETUP_HOOK", "tests.support.setup_hook_probe.mark")
    monkeypatch.delenv("VALGEN_PROBE_JOB_HOOK", raising=False)
    vg_ray.setup_worker()
    assert os.environ.pop("VALGEN_PROBE_JOB_HOOK") == "ran"
    monkeypatch.setenv("OTEL_VALGEN_CHAINED_SETUP_HOOK", "tests.support.no_such_module.setup")
    with pytest.raises(RuntimeError, match="no_such_module"):
        vg_ray.setup_worker()
