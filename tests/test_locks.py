"""User story: a lock is a lock. Installed as it is, with no resolution, it is complete and coherent.

The exporter image once installed ``requirements/exporter.lock`` *with* dependency resolution: pip
re-resolved trackio's ``uvicorn[standard]``, found a uvicorn released two days after the lock and
refused it under ``--require-hashes``, so the README's compose command failed for every new user.
Every lock is now installed without resolution (the Dockerfile's ``pip install --no-deps``, the
Makefile's ``uv pip sync``). These tests install each lock that way into a new venv and check
that nothing it needs is missing (``pip check``) and that it holds exactly the lock.

Three locks are compiled from pyproject.toml's extras (the suite's, the exporter image's, the
demo's); requirements/phoenix.lock is compiled from requirements/phoenix.in, for the Phoenix
server the trace test starts from a venv of its own (build/tools/phoenix-venv).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import REPO
from tests.support.require import require_or_skip

LOCKS = sorted((REPO / "requirements").glob("*.lock"))
DEV_LOCK = REPO / "requirements" / "dev.lock"
PHOENIX_LOCK = REPO / "requirements" / "phoenix.lock"
PHOENIX_IN = REPO / "requirements" / "phoenix.in"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)")


def pins(lock: Path) -> dict[str, str]:
    """The lock's ``name==version`` lines, by canonical name."""
    found = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        if match := _PIN.match(line):
            found[canonicalize_name(match[1])] = match[2]
    return found


def _extras(lock: Path) -> set[str]:
    """The extras of this project the lock was compiled for (``--extra NAME`` in its header)."""
    header = lock.read_text(encoding="utf-8").split("\n", 3)[1]
    return set(re.findall(r"--extra (\S+)", header))


def _in_requirements(path: Path) -> list[str]:
    """The requirements a ``.in`` file names (its lines but comments and blanks)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line]


def _source(lock: Path) -> Path | None:
    """The ``.in`` file the lock was compiled from (its header's last argument), None for pyproject.toml."""
    header = lock.read_text(encoding="utf-8").split("\n", 3)[1]
    source = header.split()[-1]
    return None if source == "pyproject.toml" else REPO / source


def unmet(site_packages: Path, project_extras: set[str], requirements: list[str] | None = None) -> list[str]:
    """What the installed packages ask for and do not have, following every extra asked for.

    ``pip check`` reads each package's own requirements only: it does not see that trackio's
    ``uvicorn[standard]`` needs uvloop. This walks the requirements from this project with
    ``project_extras`` (or, for a lock compiled from a ``.in`` file, from its ``requirements``),
    adding each extra a requirement names to what its package must provide.
    """
    installed = {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions(path=[str(site_packages)])}
    project = metadata.distribution("otel-valgen")
    wanted: dict[str, set[str]] = {}
    problems: list[str] = []
    queue: list[tuple[str, str, Requirement]] = []

    def visit(owner: str, requires: list[str] | None, extras: set[str]) -> None:
        for text in requires or []:
            requirement = Requirement(text)
            markers = requirement.marker
            if markers is None or any(markers.evaluate({"extra": extra}) for extra in extras | {""}):
                queue.append((owner, text, requirement))

    if requirements is None:
        visit("otel-valgen", project.requires, project_extras)
    else:
        visit("the .in file", requirements, set())
    while queue:
        owner, text, requirement = queue.pop()
        name = canonicalize_name(requirement.name)
        if name == "otel-valgen":  # the project's extras naming its other extras
            new = set(requirement.extras) - project_extras
            project_extras |= new
            visit("otel-valgen", project.requires, new)
            continue
        dist = installed.get(name)
        if dist is None:
            problems.append(f"{owner} requires {text}: {name} is not installed")
            continue
        if not requirement.specifier.contains(dist.version, prereleases=True):
            problems.append(f"{owner} requires {text}: {name} {dist.version} is installed")
        before = wanted.setdefault(name, set())
        new = ({""} | set(requirement.extras)) - before
        if new:
            before |= new
            visit(name, dist.requires, new)
    return sorted(set(problems))


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)


def _uv() -> Path:
    uv = next(REPO.glob("build/tools/uv-*/bin/uv"), None)
    require_or_skip(uv is not None, "build/tools/uv-*/bin/uv is missing: `make install-dev` installs it")
    assert uv is not None
    return uv


def test_the_project_has_its_four_locks() -> None:
    """The suite's, the exporter image's, the demo's, Phoenix's (a renamed lock would let the rest pass vacuously)."""
    assert {lock.name for lock in LOCKS} == {"dev.lock", "exporter.lock", "demo.lock", "phoenix.lock"}


def _install(lock: Path, venv: Path, *options: str) -> tuple[Path, Path]:
    """A new venv holding `lock` installed without resolution (`--no-deps`): its python and site-packages."""
    uv = _uv()
    made = _run([str(uv), "venv", "--quiet", "--python", sys.executable, str(venv)])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    exact = ["--no-deps", *options, "-r", str(lock)]
    installed = _run([str(uv), "pip", "install", "--quiet", "--python", str(python), *exact])
    assert installed.returncode == 0, installed.stderr[-3000:]
    (site_packages,) = venv.glob("lib/python3*/site-packages")
    return python, site_packages


@pytest.mark.parametrize("lock", LOCKS, ids=lambda lock: lock.name)
def test_a_lock_installed_without_resolution_is_complete_and_exactly_itself(lock: Path, tmp_path: Path) -> None:
    """`--no-deps --require-hashes` into a new venv, then `pip check` passes and the venv holds exactly the lock."""
    python, site_packages = _install(lock, tmp_path / "venv", "--require-hashes")
    # pip's own checker (this venv's pip, from the dev lock) on the new venv: each installed
    # package's own requirements are met; `unmet` adds the extras other packages ask for.
    check = _run([sys.executable, "-m", "pip", "--python", str(python), "check"])
    assert check.returncode == 0, f"{lock.name} is incomplete:\n{check.stdout}{check.stderr}"
    source = _source(lock)
    requirements = None if source is None else _in_requirements(source)
    assert unmet(site_packages, _extras(lock), requirements) == [], (
        f"{lock.name} lacks what its packages' extras ask for"
    )
    listed = _run([sys.executable, "-m", "pip", "--python", str(python), "list", "--format=json"])
    assert listed.returncode == 0, listed.stderr
    have = {canonicalize_name(entry["name"]): entry["version"] for entry in json.loads(listed.stdout)}
    assert have == pins(lock)


@pytest.mark.parametrize(
    "lock", [lock for lock in LOCKS if lock not in (DEV_LOCK, PHOENIX_LOCK)], ids=lambda lock: lock.name
)
def test_every_lock_holds_the_versions_the_suite_ran(lock: Path) -> None:
    """The exporter image and the demo install packages at the dev lock's versions (`make lock` constrains them)."""
    dev = pins(DEV_LOCK)
    differ = {name: (version, dev.get(name)) for name, version in pins(lock).items() if dev.get(name) != version}
    assert not differ, f"{lock.name} differs from dev.lock (name: (here, dev)): {differ}"


def test_the_phoenix_lock_is_its_in_file_compiled_on_its_own() -> None:
    """phoenix.lock holds phoenix.in's exact pins, compiled for the same platform as the other locks.

    Not constrained to the dev lock (as the exporter's and the demo's are): Phoenix needs a
    graphql-core that MLflow's graphene in the dev lock excludes (phoenix.in says so).
    """
    assert _source(PHOENIX_LOCK) == PHOENIX_IN
    header = PHOENIX_LOCK.read_text(encoding="utf-8").split("\n", 3)[1]
    dev_header = DEV_LOCK.read_text(encoding="utf-8").split("\n", 3)[1]
    platform = dev_header.split(" --extra")[0].removeprefix("#    uv pip compile")
    assert header.startswith(f"#    uv pip compile{platform} ")
    phoenix = pins(PHOENIX_LOCK)
    for text in _in_requirements(PHOENIX_IN):
        requirement = Requirement(text)
        assert str(requirement.specifier).startswith("=="), f"phoenix.in pins {requirement.name} exactly"
        assert requirement.specifier.contains(phoenix[canonicalize_name(requirement.name)])


def test_the_exporter_lock_holds_the_build_backend_its_image_builds_with() -> None:
    """The image builds this package with `--no-build-isolation`: the lock's setuptools must satisfy pyproject."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    exporter = pins(REPO / "requirements" / "exporter.lock")
    for text in project["build-system"]["requires"]:
        requirement = Requirement(text)
        version = exporter.get(canonicalize_name(requirement.name))
        assert version is not None, f"{requirement.name} (build-system) is not in exporter.lock"
        assert requirement.specifier.contains(version), f"exporter.lock's {requirement.name} {version} !{requirement}"


def test_the_check_finds_a_package_only_an_extra_asks_for(tmp_path: Path) -> None:
    """Without uvloop, which only trackio's `uvicorn[standard]` asks for, the lock is found incomplete."""
    lock = tmp_path / "exporter-without-uvloop.lock"
    kept, skipping = [], False
    for line in (REPO / "requirements" / "exporter.lock").read_text(encoding="utf-8").splitlines():
        skipping = line.startswith("uvloop==") or (skipping and line.startswith("    "))
        if not skipping:
            kept.append(line)
    lock.write_text("\n".join(kept) + "\n", encoding="utf-8")
    _, site_packages = _install(lock, tmp_path / "venv")
    assert [problem.split(":")[-1].strip() for problem in unmet(site_packages, {"exporter"})] == [
        "uvloop is not installed"
    ]
