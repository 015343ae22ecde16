"""The Ray env hook (``RAY_RUNTIME_ENV_HOOK``): a job's runtime env gains otel-valgen's, never loses its own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import otel_valgen as vg
from otel_valgen import _process
from otel_valgen import ray as vg_ray
from otel_valgen._settings import Settings, resolve_settings, variable_names


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


def _as_worker(monkeypatch: pytest.MonkeyPatch, forwarded: dict[str, str], cwd: Path) -> Settings:
    """The settings a Ray worker resolves from ``forwarded`` alone, in another working directory."""
    for name in variable_names():
        monkeypatch.delenv(name, raising=False)
    for name, value in forwarded.items():
        monkeypatch.setenv(name, value)
    cwd.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(cwd)
    return resolve_settings()


def test_a_worker_resolves_the_drivers_sampling_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """k, rollout k, seed, presampling off, the sink folder (absolute) and progress reach a worker elsewhere."""
    monkeypatch.chdir(tmp_path)
    driver = vg.configure(
        count=5, rollout_count=2, seed=9, presample=False, directory="relative-sink", progress_interval_s=3
    )
    assert driver is not None
    worker = _as_worker(monkeypatch, vg_ray.worker_env(), tmp_path / "worker-cwd")
    assert (worker.count, worker.rollout_count, worker.seed, worker.presample) == (5, 2, 9, False)
    assert worker.directory == str(tmp_path / "relative-sink")
    assert worker.progress_interval_s == 3
    assert (worker.run_id, worker.run_id_origin) == ("hooked-run", "environment")


def test_a_run_id_not_set_explicitly_goes_as_the_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The driver's ``WANDB_RUN_ID`` run id goes as OTEL_VALGEN_DEFAULT_RUN_ID: a worker's own wandb run comes first."""
    monkeypatch.delenv("OTEL_VALGEN_RUN_ID")
    monkeypatch.setenv("WANDB_RUN_ID", "wandb-7")
    forwarded = vg_ray.worker_env()
    assert "OTEL_VALGEN_RUN_ID" not in forwarded
    assert (forwarded["OTEL_VALGEN_DEFAULT_RUN_ID"], forwarded["WANDB_RUN_ID"]) == ("wandb-7", "wandb-7")
    monkeypatch.delenv("WANDB_RUN_ID")
    worker = _as_worker(monkeypatch, {k: v for k, v in forwarded.items() if k != "WANDB_RUN_ID"}, tmp_path / "w")
    assert (worker.run_id, worker.run_id_origin) == ("wandb-7", "default")


def test_forwarded_variables_are_the_set_ones_of_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tracker and OTLP variables the driver has go to workers; an empty one and a per-process one do not."""
    monkeypatch.setenv("WANDB_PROJECT", "my-project")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer x")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=rl")
    monkeypatch.setenv("MLFLOW_RUN_ID", "")
    monkeypatch.setenv("OTEL_VALGEN_SOURCE", "driver")  # each process names its own part
    forwarded = vg_ray.worker_env()
    assert forwarded["WANDB_PROJECT"] == "my-project"
    assert forwarded["OTEL_EXPORTER_OTLP_HEADERS"] == "authorization=Bearer x"
    assert forwarded["OTEL_RESOURCE_ATTRIBUTES"] == "team=rl"
    assert "MLFLOW_RUN_ID" not in forwarded
    assert "OTEL_VALGEN_SOURCE" not in forwarded


def test_a_jobs_own_env_vars_win_over_the_forwarded_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable the job's runtime env sets itself is kept as the job set it, not replaced by the driver's."""
    monkeypatch.setenv("OTEL_VALGEN_COUNT", "3")
    job_env = {"env_vars": {"OTEL_VALGEN_COUNT": "7", "OTEL_VALGEN_RUN_ID": "job-run"}}
    merged = vg_ray.runtime_env_hook(job_env)
    assert merged["env_vars"]["OTEL_VALGEN_COUNT"] == "7"
    assert merged["env_vars"]["OTEL_VALGEN_RUN_ID"] == "job-run"
    assert merged["env_vars"]["OTEL_VALGEN_SEED"] == "42"  # what the job does not set still comes


def test_a_hook_only_in_rays_variable_is_chained() -> None:
    """A job whose hook reached the driver only in Ray's variable (job submission) still runs it in every worker."""
    merged = vg_ray.runtime_env({"env_vars": {"__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR": "my_project.setup"}})
    assert merged["worker_process_setup_hook"] == "otel_valgen.ray.setup_worker"
    assert merged["env_vars"]["__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"] == "otel_valgen.ray.setup_worker"
    assert merged["env_vars"]["OTEL_VALGEN_CHAINED_SETUP_HOOK"] == "my_project.setup"


def test_a_jobs_setup_function_is_chained_before_otel_valgens() -> None:
    """A function hook (a local driver's) is wrapped: each worker runs it, then otel-valgen's setup."""
    ran: list[str] = []
    merged = vg_ray.runtime_env({"worker_process_setup_hook": lambda: ran.append("job")})
    hook = merged["worker_process_setup_hook"]
    assert callable(hook)
    assert "OTEL_VALGEN_CHAINED_SETUP_HOOK" not in merged["env_vars"]
    hook()
    assert ran == ["job"]


def test_otel_valgens_hook_never_chains_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime env that already went through runtime_env() gains no chained hook; the worker's setup runs once."""
    twice = vg_ray.runtime_env(vg_ray.runtime_env())
    assert twice["worker_process_setup_hook"] == "otel_valgen.ray.setup_worker"
    assert "OTEL_VALGEN_CHAINED_SETUP_HOOK" not in twice["env_vars"]
    monkeypatch.setenv("OTEL_VALGEN_CHAINED_SETUP_HOOK", "otel_valgen.ray.setup_worker")
    vg_ray.setup_worker()  # no recursion, no failure
