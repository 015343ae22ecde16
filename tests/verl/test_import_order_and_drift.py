"""User stories: the hooks work whatever verl imported first, and a changed verl keeps verl's own behaviour.

Each case runs in a fresh interpreter, because ``install()`` patches verl's classes once per process.
verl is the real 0.9.1; the drift cases change its real ``RayPPOTrainer`` mechanically (a method
renamed in its compiled code, a parameter added in front of verl's own function), and then run
verl's real ``_validate`` on the sync trainer of ``harness.make_sync_trainer``. Whenever verl's own
table runs instead of otel-valgen, a WARNING says why, and (unless ``OTEL_VALGEN_VERL=false``) the
step's part is sent marked unhooked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.verl import harness
from tests.verl.conftest import VerlFiles

pytestmark = pytest.mark.timeout(600)


def _run(script: str, tmp_path: Path) -> tuple[dict[str, object], str]:
    """Run ``script`` in a fresh interpreter (repo on the path); returns its last stdout line as JSON, and stderr."""
    env = {**os.environ, "PYTHONPATH": str(harness.REPO), "OTEL_VALGEN_DIR": str(tmp_path / "valgen-data")}
    env.pop("WANDB_RUN_ID", None)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=450,  # importing verl took up to 140 s on a loaded CI machine
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


def test_actor_classes_decorated_before_install_run_the_hooks(tmp_path: Path) -> None:
    """fully_async_main's order (actor modules first, hooks at ray.init): the actor classes run the hooked methods."""
    result, _ = _run(
        """
        import json
        from verl.experimental.fully_async_policy.fully_async_rollouter import FullyAsyncRollouter
        from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer
        from otel_valgen.integrations import verl as vg_verl

        verls_own = RayPPOTrainer.__dict__["_validate"]
        assert vg_verl.install()
        out = {}
        for actor in (FullyAsyncRollouter, FullyAsyncTrainer):
            actor_class = actor.__ray_metadata__.modified_class
            for name in ("_validate", "_maybe_log_val_generations"):
                method = getattr(actor_class, name)
                chain = [method]
                while hasattr(chain[-1], "__wrapped__") and len(chain) < 8:
                    chain.append(chain[-1].__wrapped__)
                out[f"{actor_class.__name__}.{name}"] = {
                    "hooked": any(f is getattr(RayPPOTrainer, name) for f in chain),
                    "traced": bool(getattr(method, "__ray_tracing_wrapped__", False)),
                }
        out["verls_own_is_wrapped"] = RayPPOTrainer._validate.__wrapped__ is verls_own
        print(json.dumps(out))
        """,
        tmp_path,
    )
    assert result.pop("verls_own_is_wrapped") is True
    assert result == {
        f"{actor}.{name}": {"hooked": True, "traced": True}
        for actor in ("FullyAsyncRollouter", "FullyAsyncTrainer")
        for name in ("_validate", "_maybe_log_val_generations")
    }


_DRIFT = """
    import json, logging, types
    from pathlib import Path
    from omegaconf import OmegaConf
    from verl.trainer.ppo import ray_trainer
    from verl.utils.tracking import ValidationGenerationsLogger
    import otel_valgen as vg
    from otel_valgen.integrations import verl as vg_verl
    from otel_valgen.reader import read_paths
    from tests.verl import harness

    cls = ray_trainer.RayPPOTrainer
    verls_validate = cls.__dict__["_validate"]
    verls_log = cls.__dict__["_maybe_log_val_generations"]
    DRIFT
    tables = []
    original_table = ValidationGenerationsLogger.log
    def spy(self, loggers, samples, step):
        tables.append({"rows": len(samples), "step": step})
        return original_table(self, loggers, samples, step)
    ValidationGenerationsLogger.log = spy

    warnings = []
    class Keep(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.WARNING:
                warnings.append(record.getMessage())
    logging.getLogger("otel_valgen").addHandler(Keep())
    installed = vg_verl.install()

    config = harness.sync_config(
        "TMP", train_path="TRAIN", val_path="VAL", model_path="MODEL", log_val_generations=4,
        extra_overrides=["trainer.logger=[console]"],
    )
    from transformers import PreTrainedTokenizerFast
    trainer = harness.make_sync_trainer(config, PreTrainedTokenizerFast.from_pretrained("MODEL"))
    trainer.validation_generations_logger = ValidationGenerationsLogger("p", "e")
    metrics = harness.run_validate(trainer)
    assert vg.flush()
    sent = [
        [type(r).__name__, r.step, getattr(r, "integration", None), getattr(r, "unhooked_reason", None)]
        for r in read_paths([p for p in [Path("valgen-data")] if p.exists()], print)
    ]
    val_core = sorted(k for k in metrics if k.startswith("val-core/"))
    print(json.dumps({
        "installed": installed, "warnings": warnings, "tables": tables, "val_core": val_core, "sent": sent,
        "unrouted": vg.stats().get("verl_tables_unrouted", 0),
    }))
"""


def _drift(verl_files: VerlFiles, tmp_path: Path, drift: str) -> tuple[dict[str, object], str]:
    """Run verl's real ``_validate`` in a fresh interpreter, after ``drift`` changed verl and ``install()``.

    Returns the WARNINGs of ``otel_valgen``, verl's own tables (rows, step), the records sent (kind,
    step, integration, unhooked reason) and ``stats()['verl_tables_unrouted']``.
    """
    script = (
        textwrap.dedent(_DRIFT)
        .replace("DRIFT", textwrap.dedent(drift).strip())
        .replace("TMP", str(tmp_path / "verl"))
        .replace("TRAIN", verl_files.train_path)
        .replace("VAL", verl_files.val_path)
        .replace("MODEL", str(verl_files.tokenizer_dir))
    )
    return _run(script, tmp_path)


def test_a_renamed_hook_warns_and_verl_keeps_its_own_table(verl_files: VerlFiles, tmp_path: Path) -> None:
    """A verl that renames _maybe_log_val_generations: one WARNING says what is not hooked; verl's table runs."""
    drift = """
    code = verls_validate.__code__
    renamed = tuple("_log_val_table" if n == "_maybe_log_val_generations" else n for n in code.co_names)
    cls._validate = types.FunctionType(
        code.replace(co_names=renamed), verls_validate.__globals__, "_validate",
        verls_validate.__defaults__, verls_validate.__closure__,
    )
    cls._log_val_table = verls_log
    del cls._maybe_log_val_generations
    """
    result, _ = _drift(verl_files, tmp_path, drift)
    warning, table_warning = result["warnings"]  # type: ignore[misc]
    assert "RayPPOTrainer has no _maybe_log_val_generations; not hooked" in warning
    assert result["tables"] == [{"rows": 4, "step": 0}]  # verl's own sort-shuffle-truncate, k rows
    assert result["val_core"]
    _assert_marked_unhooked(result, table_warning, "drift")


def test_an_extra_hook_parameter_warns_and_verl_keeps_its_own_table(verl_files: VerlFiles, tmp_path: Path) -> None:
    """A verl that adds a parameter to _maybe_log_val_generations: a WARNING, no TypeError, verl's own table."""
    drift = """
    def _maybe_log_val_generations(self, inputs, outputs, scores, data_sources=None):
        return verls_log(self, inputs, outputs, scores)
    cls._maybe_log_val_generations = _maybe_log_val_generations
    """
    result, _ = _drift(verl_files, tmp_path, drift)
    warning, table_warning = result["warnings"]  # type: ignore[misc]
    assert "_maybe_log_val_generations takes ('self', 'inputs', 'outputs', 'scores', 'data_sources')" in warning
    assert "not hooked" in warning
    assert result["tables"] == [{"rows": 4, "step": 0}]
    assert result["val_core"]
    _assert_marked_unhooked(result, table_warning, "drift")


def _assert_marked_unhooked(result: dict[str, object], warning: str, reason: str) -> None:
    """The table of verl ran once at step 0: one WARNING saying so, counted, and step 0's part sent unhooked."""
    assert result["installed"] is True
    assert "verl's own validation table ran (step 0)" in warning
    assert "was left unhooked" in warning
    assert result["unrouted"] == 1
    marks = ["unhooked", reason]
    assert result["sent"] == [["StartRecord", 0, *marks], ["EndRecord", 0, *marks]]  # no generation


def test_the_integration_turned_off_says_so_when_verls_table_runs(
    verl_files: VerlFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OTEL_VALGEN_VERL=false: verl's own table runs; one WARNING names the variable; nothing is sent."""
    monkeypatch.setenv("OTEL_VALGEN_VERL", "false")
    result, _ = _drift(verl_files, tmp_path, "pass")
    assert result["installed"] is False
    (warning,) = result["warnings"]  # type: ignore[misc]
    assert "verl's own validation table ran (step 0)" in warning
    assert "OTEL_VALGEN_VERL=false turned the verl integration off" in warning
    assert "unset OTEL_VALGEN_VERL" in warning
    assert result["tables"] == [{"rows": 4, "step": 0}]
    assert result["val_core"]
    assert result["unrouted"] == 1
    assert result["sent"] == []


def test_an_actor_class_copy_left_unrepaired_is_loud(tmp_path: Path) -> None:
    """A @ray.remote class made before install() where the repair cannot find it (a local name) keeps verl's copy.

    Its validation writes verl's own table: one WARNING names the actor class and the fix, and step 4's part
    is sent marked unhooked (actor_copy).
    """
    result, _ = _run(
        """
        import json, logging
        from pathlib import Path
        import ray
        from omegaconf import OmegaConf
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer
        from verl.utils.tracking import ValidationGenerationsLogger
        import otel_valgen as vg
        from otel_valgen.integrations import verl as vg_verl
        from otel_valgen.reader import read_paths

        def make_actor_class():
            class LocalTrainer(RayPPOTrainer):
                pass
            return ray.remote(LocalTrainer)

        made = [make_actor_class()]  # not a module global: repair_actor_classes cannot find it
        warnings = []
        class Keep(logging.Handler):
            def emit(self, record):
                if record.levelno >= logging.WARNING:
                    warnings.append(record.getMessage())
        logging.getLogger("otel_valgen").addHandler(Keep())
        assert vg_verl.install()
        actor_class = made[0].__ray_metadata__.modified_class
        trainer = object.__new__(actor_class)  # what verl's _validate needs of it for this call
        trainer.config = OmegaConf.create({"trainer": {"log_val_generations": 2, "logger": ["console"]}})
        trainer.validation_generations_logger = ValidationGenerationsLogger("p", "e")
        trainer.global_steps = 4
        actor_class._maybe_log_val_generations(trainer, ["q0", "q1"], ["a0", "a1"], [1.0, 0.0])
        assert vg.flush()
        sent = [
            [type(r).__name__, r.step, r.source, getattr(r, "integration", None), getattr(r, "unhooked_reason", None)]
            for r in read_paths([Path("valgen-data")], print)
        ]
        print(json.dumps({"warnings": warnings, "sent": sent}))
        """,
        tmp_path,
    )
    (warning,) = result["warnings"]  # type: ignore[misc]
    assert "verl's own validation table ran (step 4)" in warning
    assert "the Ray actor class __main__." in warning
    assert "LocalTrainer holds a copy of verl's own _maybe_log_val_generations" in warning
    assert "install() before the module that makes the actor class is imported" in warning
    marks = ["trainer", "unhooked", "actor_copy"]
    assert result["sent"] == [["StartRecord", 4, *marks], ["EndRecord", 4, *marks]]


_ROLLOUT_DRIFT = """
    import json, logging
    from verl.trainer.ppo import ray_trainer
    import otel_valgen as vg
    from otel_valgen.integrations import verl as vg_verl

    cls = ray_trainer.RayPPOTrainer
    cls._update_policy = cls.__dict__["_update_actor"]  # a verl that renamed the rollout hook point
    del cls._update_actor
    warnings = []
    class Keep(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.WARNING:
                warnings.append(record.getMessage())
    logging.getLogger("otel_valgen").addHandler(Keep())
    vg_verl.install()
    print(json.dumps({"warnings": warnings, "missing": vg.stats().get("verl_rollout_hooks_missing", 0)}))
"""


@pytest.mark.parametrize("rollouts", ["2", "0"])
def test_a_missing_rollout_hook_point_is_counted_and_loud_when_rollouts_are_on(
    rollouts: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verl without ``RayPPOTrainer._update_actor``: counted; a WARNING with the fix when rollouts are asked for."""
    monkeypatch.setenv("OTEL_VALGEN_ROLLOUT_COUNT", rollouts)
    result, _ = _run(_ROLLOUT_DRIFT, tmp_path)
    assert result["missing"] == 1
    if rollouts == "0":
        assert result["warnings"] == []  # nothing asked for: an INFO line only
        return
    (warning,) = result["warnings"]  # type: ignore[misc]
    assert "RayPPOTrainer._update_actor is missing; not hooked: its training rollouts are not sent" in warning
    assert "send_rollout_batch" in warning
