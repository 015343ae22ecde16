"""The images' build steps, replayed without Docker on exactly the files their build contexts send.

Each Dockerfile has its own ignore file (``docker/<name>.Dockerfile.dockerignore``); a build
step that needs a file the context leaves out fails only when the image is built. These tests
assemble each context by Docker's ignore rules (the last matching pattern wins; ``!`` includes;
a pattern matching a folder covers its contents) and run the build stage's command on it.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from tests.deploy import harness

DOCKER = harness.REPO / "docker"
PT_INTERP = 3  # ELF program header type of the dynamic loader's path


def _pattern(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out)


def context_files(dockerfile: Path) -> list[str]:
    """Repository files (tracked or not, never build output) that the Dockerfile's context sends."""
    rules = []
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore").read_text(encoding="utf-8")
    for raw in ignore.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            rules.append((negated, _pattern(line.lstrip("!").strip("/"))))
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=harness.REPO,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.split()
    sent = []
    for path in listed:
        parts = path.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        included = True
        for negated, rule in rules:
            if any(rule.fullmatch(prefix) for prefix in prefixes):
                included = negated
        if included and (harness.REPO / path).is_file():
            sent.append(path)
    return sent


def copy_context(dockerfile: Path, target: Path) -> list[str]:
    """Copy the context of `dockerfile` into `target`; the relative paths copied."""
    files = context_files(dockerfile)
    for path in files:
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(harness.REPO / path, target / path)
    return files


def is_static_elf(path: Path) -> bool:
    """True for a 64-bit little-endian ELF without a dynamic loader (no PT_INTERP header)."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF", f"{path} is not an ELF file"
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    types = [struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)]
    return PT_INTERP not in types


def test_contexts_send_what_the_dockerfiles_copy() -> None:
    """Each context holds the sources its Dockerfile copies and nothing from build/ or the tests."""
    collector = context_files(DOCKER / "collector.Dockerfile")
    assert "collector/builder-config.yaml" in collector
    assert "collector/build.sh" in collector
    assert "collector-config/collector.yaml" in collector
    assert "docker/collector-entrypoint.sh" in collector
    assert not [p for p in collector if p.endswith("_test.go") or "/testdata/" in p or p.startswith("build/")]
    exporter = context_files(DOCKER / "tracker-exporter.Dockerfile")
    assert {
        "pyproject.toml",
        "README.md",
        "requirements/exporter.lock",
        "docker/tracker-exporter-entrypoint.sh",
        "otel_valgen/cli/main.py",
    } <= set(exporter)
    assert not [
        p
        for p in exporter
        if not p.startswith(("otel_valgen/", "docker/", "pyproject", "README", "requirements/exporter.lock"))
    ]


def test_tracker_exporter_context_builds_the_package(tmp_path: Path) -> None:
    """The exporter context alone is enough to build this package's wheel (the image then installs it with pip)."""
    context = tmp_path / "context"
    copy_context(DOCKER / "tracker-exporter.Dockerfile", context)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "wheels"),
            ".",
        ],
        cwd=context,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert [p.name.split("-")[0] for p in (tmp_path / "wheels").glob("*.whl")] == ["otel_valgen"]
