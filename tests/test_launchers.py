"""Processes of one launch share its launch id (hence each step's attempt); the next launch gets a new one.

The launchers' variables are set as torchrun, Slurm and the MPI launchers set them; processes
are real subprocesses where the story needs several. Only the library, pytest and hypothesis.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import otel_valgen as vg
from otel_valgen import _env, _launch_group, _process
from otel_valgen import ray as vg_ray
from otel_valgen._settings import resolve_settings
from otel_valgen.reader import read_paths
from otel_valgen.sampling import SortKey, bottom_k, sample_key, untagged
from otel_valgen.selection import select_attempts
from otel_valgen.testing import capture_records
from tests.conftest import REPO
from tests.support.process import run_in_a_terminal

TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "3f2a",
    "TORCHELASTIC_RESTART_COUNT": "0",
    "MASTER_ADDR": "node0",
    "MASTER_PORT": "29500",
}
TORCHRUN_NO_ID = {**TORCHRUN, "TORCHELASTIC_RUN_ID": "none"}
SLURM = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3"}
HYDRA = {"PMI_RANK": "1", "PMI_SIZE": "4", "PMI_FD": "7", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "4"}

PROCESS_GROUP = "<this process group's launch>"
CASES: dict[str, tuple[dict[str, str], str]] = {
    "no launcher": ({}, PROCESS_GROUP),
    "no launcher, a job that may span hosts": ({"WORLD_SIZE": "8", "RANK": "3"}, "run"),
    "no launcher, more ranks than on this host": ({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}, "run"),
    "no launcher, every rank on this host": ({"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"}, PROCESS_GROUP),
    "torchrun --rdzv-id": (TORCHRUN, "torchelastic-3f2a"),
    "torchrun, restarted twice": ({**TORCHRUN, "TORCHELASTIC_RESTART_COUNT": "2"}, "torchelastic-3f2a-r2"),
    "torchrun without --rdzv-id": (TORCHRUN_NO_ID, "torchelastic-node0:29500"),
    "torchrun without --rdzv-id, restarted": (
        {**TORCHRUN_NO_ID, "TORCHELASTIC_RESTART_COUNT": "1"},
        "torchelastic-node0:29500-r1",
    ),
    "torchrun without --rdzv-id in a Slurm job": ({**TORCHRUN_NO_ID, **SLURM}, "torchelastic-slurm-4242"),
    "torchrun without --rdzv-id under mpirun": (
        {**TORCHRUN_NO_ID, "PMIX_NAMESPACE": "prterun-n0-77@1"},
        "torchelastic-pmix-prterun-n0-77@1",
    ),
    "torchrun in a Slurm job": ({**TORCHRUN, **SLURM}, "torchelastic-3f2a"),
    "Slurm task": (SLURM, "slurm-4242"),
    "Slurm batch script (its own step)": ({"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "4294967291"}, "slurm-4242"),
    "Slurm, requeued once": ({**SLURM, "SLURM_RESTART_COUNT": "1"}, "slurm-4242-r1"),
    "Slurm, never requeued": ({**SLURM, "SLURM_RESTART_COUNT": "0"}, "slurm-4242"),
    "Slurm heterogeneous component": ({"SLURM_JOB_ID": "4243", "SLURM_JOB_ID_HET_GROUP_0": "4242"}, "slurm-4242"),
    "Open MPI 5 (PMIx)": ({"PMIX_NAMESPACE": "prterun-n0-77@1", "OMPI_COMM_WORLD_RANK": "2"}, "pmix-prterun-n0-77@1"),
    "Open MPI 4 (ORTE)": ({"OMPI_MCA_ess_base_jobid": "2914451457", "OMPI_COMM_WORLD_RANK": "2"}, "openmpi-2914451457"),
    "mpirun in a Slurm job": ({**SLURM, "PMIX_NAMESPACE": "prterun-n0-77@1"}, "slurm-4242"),
    "MPICH or Intel MPI (Hydra): nothing per job": (HYDRA, PROCESS_GROUP),
    "MPICH (Hydra) across hosts": ({**HYDRA, "WORLD_SIZE": "4"}, "run"),
    "OTEL_VALGEN_LAUNCH_ID wins": ({**TORCHRUN, **SLURM, "OTEL_VALGEN_LAUNCH_ID": "mine"}, "mine"),
}


def _set(monkeypatch: pytest.MonkeyPatch, variables: Mapping[str, str]) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def _subprocess_env(variables: Mapping[str, str]) -> dict[str, str]:
    """The test's environment (the conftest cleared every variable the library reads), plus ``variables``."""
    return {**os.environ, "PYTHONPATH": str(REPO), **variables}


@pytest.mark.parametrize(("variables", "expected"), CASES.values(), ids=CASES.keys())
def test_each_launchers_variables_name_the_launch(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], expected: str
) -> None:
    """The launch id: the first launcher whose variables the process has, else the process group's, else `run`."""
    _set(monkeypatch, variables)
    launch = resolve_settings(run_id="r").launch_id
    if expected == PROCESS_GROUP:
        assert launch == _launch_group.launch_id()
        assert re.fullmatch(rf"pg{os.getpgrp()}-[0-9a-f]{{8}}", launch)
    else:
        assert launch == expected


def test_an_argument_beats_every_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """``configure(launch_id=...)`` wins over OTEL_VALGEN_LAUNCH_ID and the launchers."""
    _set(monkeypatch, {**TORCHRUN, "OTEL_VALGEN_LAUNCH_ID": "from-env"})
    assert resolve_settings(run_id="r", launch_id="from-code").launch_id == "from-code"


@given(st.integers(0, 10**6), st.integers(0, 10**6), st.sampled_from(["torchelastic", "slurm"]))
def test_a_restart_is_a_new_launch(first: int, second: int, launcher: str) -> None:
    """Two restart counts give the same launch id exactly when they are equal; the id stays the launcher's."""
    base = TORCHRUN if launcher == "torchelastic" else SLURM
    counter = "TORCHELASTIC_RESTART_COUNT" if launcher == "torchelastic" else "SLURM_RESTART_COUNT"
    ids = []
    for restarts in (first, second):
        with pytest.MonkeyPatch.context() as monkeypatch:
            _set(monkeypatch, {**base, counter: str(restarts)})
            ids.append(resolve_settings(run_id="r").launch_id)
    assert (ids[0] == ids[1]) is (first == second)
    assert all(launch.startswith(f"{launcher}-") for launch in ids)


@pytest.mark.parametrize("counter", ["TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT"])
def test_a_bad_restart_count_warns_and_counts_as_none(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, counter: str
) -> None:
    """A restart count that is not a number is logged; the launch id is that of no restart."""
    launcher, expected = (TORCHRUN, "torchelastic-3f2a") if counter.startswith("TORCH") else (SLURM, "slurm-4242")
    _set(monkeypatch, {**launcher, counter: "two"})
    with caplog.at_level(logging.WARNING, logger="otel_valgen"):
        assert resolve_settings(run_id="r").launch_id == expected
    assert f"{counter}='two'" in caplog.text


def test_torchruns_constant_none_is_never_the_launch_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two launches without --rdzv-id (both `none`) on different rendezvous ports get different ids."""
    ids = set()
    for port in ("29500", "29501"):
        _set(monkeypatch, {**TORCHRUN_NO_ID, "MASTER_PORT": port})
        ids.add(resolve_settings(run_id="r").launch_id)
    assert len(ids) == 2
    assert not any("none" in launch for launch in ids)


# One write(2) per id: the processes of one script share the terminal, and print's separate writes
# of the id and its newline could interleave ("pgN-xpgN-x\n\n", seen in the lowest range lane).
_PRINT_LAUNCH = "import os, otel_valgen as vg; os.write(1, (vg.configure(run_id='r').launch_id + '\\n').encode())"


@pytest.mark.parametrize(
    ("variables", "expected"),
    [({"OTEL_VALGEN_LAUNCH_ID": "job-42"}, "job-42"), (TORCHRUN_NO_ID, "torchelastic-node0:29500")],
    ids=["OTEL_VALGEN_LAUNCH_ID", "torchrun without --rdzv-id"],
)
def test_separate_processes_of_one_launch_find_the_same_id(variables: dict[str, str], expected: str) -> None:
    """Two real processes of one run with the same launcher environment resolve the same launch id."""
    env = _subprocess_env(variables)
    ids = {
        subprocess.run(
            [sys.executable, "-c", _PRINT_LAUNCH], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(2)
    }
    assert ids == {expected}


def _in_a_terminal(script: str, env: Mapping[str, str]) -> list[str]:
    """Run a shell script as a terminal runs a command line; the launch ids it printed."""
    return run_in_a_terminal(script, env).split()


_SLEEP = "; import sys, time; time.sleep(float(sys.argv[1]))"
_PROBE = f"{shlex.quote(sys.executable)} -c {shlex.quote(_PRINT_LAUNCH + _SLEEP)}"


def test_three_processes_started_by_one_script_are_one_launch() -> None:
    """`a & b & c & wait` in one script: one process group, one launch id, whichever ends first."""
    ids = _in_a_terminal(f"{_PROBE} 0 & {_PROBE} 0.5 & {_PROBE} 0 & wait", _subprocess_env({}))
    assert len(ids) == 3
    assert len(set(ids)) == 1
    assert re.fullmatch(r"pg[0-9]+-[0-9a-f]{8}", ids[0])


def test_a_script_run_again_is_a_new_launch() -> None:
    """The same script run twice from a terminal: two process groups, two launch ids."""
    env = _subprocess_env({})
    first, second = (_in_a_terminal(f"{_PROBE} 0", env) for _ in range(2))
    assert first != second


def test_a_process_started_after_the_others_ended_is_a_new_launch() -> None:
    """`python train.py; python train.py --resume` in one script: the second, after the first ended, is a new launch."""
    gap = _launch_group.STARTED_TOGETHER_S + 0.5
    first, resumed = _in_a_terminal(f"{_PROBE} 0; sleep {gap}; {_PROBE} 0", _subprocess_env({}))
    assert first != resumed


def test_a_process_started_while_the_launch_runs_joins_it() -> None:
    """A process the script starts later, while a process of the launch still runs, joins that launch."""
    gap = _launch_group.STARTED_TOGETHER_S + 0.5
    ids = _in_a_terminal(f"{_PROBE} {gap + 2} & sleep {gap}; {_PROBE} 0; wait", _subprocess_env({}))
    assert len(ids) == 2
    assert len(set(ids)) == 1


def test_a_launch_folder_another_user_could_write_is_not_used(tmp_path: Path) -> None:
    """A launch folder open to others (or a link) is refused: the process falls back to one launch per run."""
    shared = tmp_path / "runtime"
    (shared / "otel-valgen").mkdir(parents=True, mode=0o777)
    os.chmod(shared / "otel-valgen", 0o777)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "otel-valgen").symlink_to(tmp_path)
    for runtime in (shared, linked):
        (launch,) = _in_a_terminal(f"{_PROBE} 0", _subprocess_env({"XDG_RUNTIME_DIR": str(runtime)}))
        assert launch == "run"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder to another user")
def test_a_private_launch_folder_another_user_owns_is_refused(tmp_path: Path) -> None:
    """A launch folder owned by another user is refused even with private permissions (0700).

    The process falls back to one launch per run (`run`) with one warning naming the folder, and
    writes no launch file there (root could: only the owner check stops it).
    """
    runtime = tmp_path / "runtime"
    folder = runtime / "otel-valgen"
    folder.mkdir(parents=True)
    os.chown(folder, 65534, 65534)  # nobody
    os.chmod(folder, 0o700)
    errors = tmp_path / "stderr"
    env = _subprocess_env({"XDG_RUNTIME_DIR": str(runtime)})
    (launch,) = _in_a_terminal(f"{_PROBE} 0 2>{shlex.quote(str(errors))}", env)
    assert launch == "run"
    warning = errors.read_text(encoding="utf-8")
    assert warning.count("cannot tell this process group's launch") == 1, warning
    assert f"{folder} is not a private folder of this user" in warning
    assert list(folder.iterdir()) == []
    found = os.lstat(folder)
    assert (found.st_uid, found.st_mode & 0o777) == (65534, 0o700)


# One process of a script that runs them one after another: it configures no sooner than argv[2]
# seconds after the previous one did (the log argv[1]'s last line), then appends
# "<launch id> <monotonic time before configuring> <after>" to the log.
_PACED = textwrap.dedent(
    """
    import sys, time
    import otel_valgen as vg
    log, spacing = sys.argv[1], float(sys.argv[2])
    with open(log) as lines:
        previous = [float(line.split()[2]) for line in lines]
    if previous:
        time.sleep(max(0.0, previous[-1] + spacing - time.monotonic()))
    before = time.monotonic()
    launch = vg.configure(run_id="r").launch_id
    after = time.monotonic()
    with open(log, "a") as out:
        out.write(f"{launch} {before} {after}\\n")
    """
)


def test_a_plain_launch_is_joined_within_2_s_of_its_last_process(tmp_path: Path) -> None:
    """A plain launch is joined within 2 s of its last process, not its first: each process that joins moves it on.

    A script runs five short processes one after another, each ended before the next starts,
    about 0.8 s apart: the last configures more than 2 s after the first, yet within 2 s of the
    one before it, and all five are one launch. A window counted from the first process would
    split them. A machine too slow to start a process within 2 s of the last one ended cannot
    show the rule: the script is run once more, then the test is skipped.
    """
    window = _launch_group.STARTED_TOGETHER_S
    env = _subprocess_env({"XDG_RUNTIME_DIR": str(tmp_path)})
    probe = f"{shlex.quote(sys.executable)} -c {shlex.quote(_PACED)}"
    for run in range(2):
        log = tmp_path / f"run-{run}.log"
        log.touch()
        _in_a_terminal(f"for i in 1 2 3 4 5; do {probe} {shlex.quote(str(log))} 0.8; done", env)
        lines = [line.split() for line in log.read_text(encoding="utf-8").splitlines()]
        ids = [launch for launch, _, _ in lines]
        before, after = ([float(line[i]) for line in lines] for i in (1, 2))
        longest_gap = max(b - a for a, b in zip(before, after[1:], strict=False))
        if longest_gap < window - 0.2:
            break
    else:
        pytest.skip(f"processes started more than {window - 0.2:.1f} s apart in 2 runs: the machine is too slow")
    assert len(ids) == 5
    assert before[-1] - after[0] > window + 0.5, "the five processes must span more than the window"
    assert len(set(ids)) == 1, ids
    assert re.fullmatch(r"pg[0-9]+-[0-9a-f]{8}", ids[0])


_VALIDATE_PART = textwrap.dedent(
    """
    import sys
    import otel_valgen as vg
    part = sys.argv[1]
    ids = [f"{part}-{i}" for i in range(int(sys.argv[2]))]
    with vg.validation(step=1, sources_expected=2):
        vg.log_generations([f"question {i}" for i in ids], ["answer"] * len(ids), [0.5] * len(ids), sample_ids=ids)
    """
)


def test_two_plain_processes_validating_one_step_form_one_attempt(tmp_path: Path) -> None:
    """A split launch: two plain processes started by one script, one run id, each half of step 1: one attempt."""
    sink = tmp_path / "sink"
    env = _subprocess_env({"OTEL_VALGEN_RUN_ID": "plain", "OTEL_VALGEN_COUNT": "5", "OTEL_VALGEN_DIR": str(sink)})
    validate = f"{shlex.quote(sys.executable)} -c {shlex.quote(_VALIDATE_PART)}"
    _in_a_terminal(f"{validate} a 20 & {validate} b 20 & wait", env)
    ((_, attempts),) = select_attempts(read_paths([sink], pytest.fail)).items()
    (attempt,) = attempts
    ids = [f"{part}-{i}/0" for part in "ab" for i in range(20)]
    expected = [i for _, i in bottom_k(((SortKey.of(sample_key(42, i), i), i) for i in ids), 5)]
    assert re.fullmatch(r"pg[0-9]+-[0-9a-f]{8}\.1", attempt.attempt)
    assert (attempt.seen, attempt.complete) == (40, True)
    assert [untagged(g.sample_id) for g in attempt.generations] == expected


_PARENT_AND_CHILD = textwrap.dedent(
    """
    import multiprocessing
    import sys
    import otel_valgen as vg


    def part(name):
        with vg.validation(step=1, source=name, sources_expected=2):
            vg.log_generations([name], ["answer"], [1.0], sample_ids=[name])


    if __name__ == "__main__":
        launch_id = sys.argv[2] or None
        vg.configure(run_id="mp", directory=sys.argv[3], launch_id=launch_id)
        child = multiprocessing.get_context(sys.argv[1]).Process(target=part, args=("child",))
        child.start()
        child.join(60)
        part("parent")
        sys.exit(child.exitcode)
    """
)


@pytest.mark.parametrize("start_method", ["spawn", "forkserver", "fork"])
@pytest.mark.parametrize("launch_id", ["from-configure", ""], ids=["configured launch id", "no launcher"])
def test_a_multiprocessing_child_shares_its_configured_parents_attempt(
    tmp_path: Path, start_method: str, launch_id: str
) -> None:
    """A child started after configure() (spawn, forkserver or fork) validates under the parent's attempt."""
    script = tmp_path / "parent.py"
    script.write_text(_PARENT_AND_CHILD, encoding="utf-8")
    sink = tmp_path / "sink"
    command = shlex.join([sys.executable, str(script), start_method, launch_id, str(sink)])
    _in_a_terminal(command, _subprocess_env({}))
    records = list(read_paths([sink], pytest.fail))
    (attempt,) = {r.attempt for r in records}
    assert {r.source for r in records} == {"child", "parent"}
    assert attempt == f"{launch_id}.1" if launch_id else re.fullmatch(r"pg[0-9]+-[0-9a-f]{8}\.1", attempt)


def test_only_ids_a_child_could_not_find_go_into_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """configure(launch_id=...) is told to children via OTEL_VALGEN_LAUNCH_ID; a launcher's or the fallback is not."""
    vg.configure(run_id="r")
    assert _env.OTEL_VALGEN_LAUNCH_ID not in os.environ
    _set(monkeypatch, SLURM)
    vg.configure(run_id="r")
    assert _env.OTEL_VALGEN_LAUNCH_ID not in os.environ
    vg.configure(run_id="r", launch_id="L")
    assert os.environ[_env.OTEL_VALGEN_LAUNCH_ID] == "L"
    vg.configure(run_id="r", launch_id="M")
    assert os.environ[_env.OTEL_VALGEN_LAUNCH_ID] == "M"
    _process.reset_for_testing()
    assert _env.OTEL_VALGEN_LAUNCH_ID not in os.environ


def test_capture_records_leaves_the_environment_as_it_found_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The testing helper's launch id is told to children only inside the block; a user's own value stays."""
    monkeypatch.setenv(_env.OTEL_VALGEN_LAUNCH_ID, "users")
    with capture_records(run_id="r", launch_id="captured"):
        assert os.environ[_env.OTEL_VALGEN_LAUNCH_ID] == "captured"
    assert os.environ[_env.OTEL_VALGEN_LAUNCH_ID] == "users"


class _FakeRay(types.ModuleType):
    """Just enough of ``ray`` for the launch id: a job id once ``init`` was called."""

    def __init__(self) -> None:
        super().__init__("ray")
        self.job_id: str | None = None

    def is_initialized(self) -> bool:
        return self.job_id is not None

    def get_runtime_context(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(get_job_id=lambda: self.job_id)


def test_a_ray_driver_without_a_launcher_lets_its_workers_use_the_ray_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Configured before ray.init: no launch id is forwarded; once connected, the driver uses `ray-<job id>` too."""
    ray = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", ray)
    vg.configure(run_id="r", directory=str(tmp_path))
    assert _env.OTEL_VALGEN_LAUNCH_ID not in vg_ray.worker_env()
    ray.job_id = "02000000"
    with vg.validation(step=1):
        vg.log_generations(["q"], ["a"], [1.0])
    vg.flush()
    assert {r.attempt for r in read_paths([tmp_path], pytest.fail)} == {"ray-02000000.1"}
    assert os.environ[_env.OTEL_VALGEN_LAUNCH_ID] == "ray-02000000"  # for the driver's own children


def test_a_ray_driver_forwards_a_launchers_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver in a Slurm job forwards the Slurm launch id, which Ray workers then rank first."""
    _set(monkeypatch, SLURM)
    assert vg_ray.worker_env()[_env.OTEL_VALGEN_LAUNCH_ID] == "slurm-4242"


def test_a_launch_file_locked_by_another_process_never_holds_configure_up(tmp_path: Path) -> None:
    """A launch file whose lock another process keeps: configuring gives up after LOCK_WAIT_S, never hangs."""
    name = f"launch-{os.getpgrp()}-{_launch_group._namespace()}.lock"
    with open(tmp_path / name, "w") as kept:
        fcntl.flock(kept, fcntl.LOCK_EX)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            _launch_group._join_or_start(tmp_path, os.getpgrp())
        assert time.monotonic() - started < _launch_group.LOCK_WAIT_S + 1
