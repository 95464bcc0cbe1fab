"""The sweep after a run: every process of a slot's uids dies, and where the slot has a pids cgroup
that its workers are born in, the sweep lists that cgroup instead of walking /proc (issue 31).

Each test checks what survives with its own walk of /proc (the real ``processes_of_uids``), never
through the cgroup the executor used, so a process that escaped the cgroup would be seen. Both
launch modes: under bwrap the end of the worker's pid namespace already kills what the harness
started, so the landlock runs (no pid namespace) are the ones where only the sweep stands between a
daemon and the next run."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hostile_harnesses import H
from test_sandbox import Echo, Toy

from harnesslearn.evaluation import task_tools
from harnesslearn.sandbox import Budgets, Executor, ExecutorConfig, RunRecord, Status, launcher
from harnesslearn.sandbox.cgroup import SlotCgroup
from harnesslearn.sandbox.uids import lease_uid, release_all
from harnesslearn.tasks.base import Problem

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")

REAL_WALK = launcher.processes_of_uids

DAEMONS = '''
import os, time
def daemon():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            while True:
                time.sleep(0.05)
        os._exit(0)
def solve(model, question):
    daemon()
    tool = model.python("import os, time\\nif os.fork() == 0:\\n    os.setsid()\\n"
                        "    if os.fork() == 0:\\n        while True: time.sleep(0.05)\\n    os._exit(0)\\nprint('spawned')")
    time.sleep(0.1)
    return tool.strip() + ' ' + model(question)
'''

FORK_BOMB = H["fork_bomb"][0]  # the hostile suite's own


def _slot_cgroup_here() -> bool:
    if os.geteuid() != 0 or launcher.find_setpriv() is None:
        return False
    cg = SlotCgroup.create("probe-issue31")
    if cg is None:
        return False
    cg.remove()
    return True


needs_cgroup = pytest.mark.skipif(not _slot_cgroup_here(), reason="needs root, setpriv and writable cgroup v1 "
                                  "memory and pids hierarchies (the slot cgroups)")


@dataclass
class Seen:
    """What a session saw: the records, the /proc walks and cgroup listings during the runs, survivors."""

    records: list[RunRecord] = field(default_factory=list)
    walks: int = 0
    listings: int = 0
    survivors: list[int] = field(default_factory=list)
    born_inside: list[bool] = field(default_factory=list)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Seen]:
    seen = Seen()
    real_members = SlotCgroup.members

    def walk(uids: tuple[int, ...]) -> list[int]:
        seen.walks += 1
        return REAL_WALK(uids)

    def members(self: SlotCgroup) -> list[int]:
        seen.listings += 1
        return real_members(self)

    monkeypatch.setattr(launcher, "processes_of_uids", walk)
    monkeypatch.setattr(SlotCgroup, "members", members)
    yield seen


def _session(seen: Seen, source: str, n: int, budgets: Budgets, isolation: str) -> None:
    problems = [Problem(f"p{i}", f"question {i}", "x") for i in range(n)]

    async def go() -> None:
        async with Executor(Echo(), ExecutorConfig(concurrency=2, python_tool_timeout_s=1.0, isolation=isolation)) as ex:
            seen.walks = seen.listings = 0  # the start's sweeps of leftovers from earlier holders walk /proc
            seen.records = await ex.run(source, problems, task_tools(Toy()), budgets)
            fresh: set[int] = set()
            for slot in ex._slots:
                assert slot.pending is not None
                w = await slot.pending
                seen.born_inside.append(w.cgroup is not None)
                fresh |= {w.proc.pid, *launcher.children_of(w.proc.pid)}
            seen.survivors = [pid for pid in REAL_WALK(tuple(ex.slot_uids)) if pid not in fresh]

    asyncio.run(go())
    assert seen.born_inside  # the session ran


ISOLATIONS = pytest.mark.parametrize("isolation", [
    pytest.param("bwrap", marks=pytest.mark.skipif(launcher.find_bwrap() is None, reason="no bubblewrap here")),
    "landlock"])


@needs_cgroup
def test_workers_are_born_in_the_slot_pids_cgroup_and_moved_into_its_memory_cgroup() -> None:
    async def go() -> list[str]:
        async with Executor(Echo(), ExecutorConfig(concurrency=1)) as ex:
            slot = ex._slots[0]
            assert slot.pending is not None and slot.cgroup is not None
            w = await slot.pending
            assert w.cgroup is slot.cgroup
            return [Path(f"/proc/{pid}/cgroup").read_text() for pid in (w.proc.pid, *launcher.children_of(w.proc.pid))]

    for text in asyncio.run(go()):
        lines = dict(line.split(":", 2)[1:] for line in text.splitlines())
        assert lines["pids"].rpartition("/")[2].startswith("harnesslearn-"), text
        assert lines["memory"].rpartition("/")[2].startswith("harnesslearn-"), text


@needs_cgroup
@ISOLATIONS
def test_sweeps_list_the_slot_cgroup_instead_of_walking_proc(counted: Seen, isolation: str) -> None:
    _session(counted, DAEMONS, 4, Budgets(timeout_s=10), isolation)
    assert [r.status for r in counted.records] == [Status.OK] * 4, [r.error for r in counted.records]
    assert counted.born_inside == [True, True]
    assert counted.walks == 0
    assert counted.listings >= 4 + 4  # each run's sweep and each python-tool worker's, at least once


@needs_cgroup
@ISOLATIONS
def test_double_forked_daemons_of_the_harness_and_its_python_tool_die_with_the_run(counted: Seen, isolation: str) -> None:
    _session(counted, DAEMONS, 4, Budgets(timeout_s=10), isolation)
    assert all(r.answer == f"spawned echo question {i}" for i, r in enumerate(counted.records))
    assert counted.survivors == []


@needs_cgroup
@pytest.mark.skipif(launcher.find_bwrap() is None, reason="no bubblewrap here")
def test_a_fork_bomb_dies_with_the_run(counted: Seen) -> None:
    """bwrap only: in landlock mode the bomb's killed children wait as zombies for the machine's
    PID 1 to reap them, holding the slot uid's RLIMIT_NPROC for a later test's runs meanwhile."""
    _session(counted, FORK_BOMB, 3, Budgets(timeout_s=1.5), "bwrap")
    assert [r.status for r in counted.records] == [Status.TIMEOUT] * 3
    assert counted.walks == 0
    assert counted.survivors == []


@pytest.mark.skipif(os.geteuid() != 0, reason="slot uids (and their sweeps) exist only as root")
@pytest.mark.parametrize("without", ["cgroup", "setpriv"])
def test_without_a_birth_cgroup_the_sweep_walks_proc_and_still_kills_everything(
        counted: Seen, monkeypatch: pytest.MonkeyPatch, without: str) -> None:
    """No slot cgroup (non-root, cgroup v2-only hosts), or no setpriv (Python drops the uid before
    exec, so the joining shell could not write to the cgroup: the worker is moved in after its start):
    the sweeps walk /proc, as before."""
    if without == "cgroup":
        monkeypatch.setattr(SlotCgroup, "create", classmethod(lambda cls, name: None))
    else:
        monkeypatch.setattr(launcher, "find_setpriv", lambda: None)
    _session(counted, DAEMONS, 2, Budgets(timeout_s=10), "landlock")
    assert [r.status for r in counted.records] == [Status.OK] * 2, [r.error for r in counted.records]
    assert counted.born_inside == [False, False]
    assert counted.walks >= 2
    assert counted.survivors == []


@needs_cgroup
def real_uid(pid: int) -> int | None:
    """The real uid of a live process (``/proc/PID/status``), None when it is gone."""
    try:
        line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("Uid:"))
    except (OSError, StopIteration):
        return None
    return int(line.split()[1])


def test_a_cgroup_sweep_kills_only_the_given_uids() -> None:
    """The pidfd pin and the uid check stay: a member of the cgroup with another uid is spared."""
    leases = [lease_uid(), lease_uid()]
    cg = SlotCgroup.create(f"test-{leases[0].uid}")
    assert cg is not None
    procs = []
    try:
        for lease in leases:
            argv, ids = launcher.as_uid(["/bin/sleep", "60"], lease.uid)
            assert ids == {}
            procs.append(subprocess.Popen(cg.join_argv(argv)))
        def ready() -> bool:  # both joined, and both already run as their uid: a member still running as root (the
            # join wrapper before setpriv's exec) is rightly spared by the uid check, and under load that window is long
            return set(cg.members()) >= {p.pid for p in procs} and all(
                real_uid(p.pid) == lease.uid for p, lease in zip(procs, leases, strict=True))

        for _ in range(3000):
            if ready():
                break
            time.sleep(0.01)
        assert ready()
        assert launcher.kill_uid(leases[0].uid, within=cg)
        assert procs[0].wait(5) == -9
        assert procs[1].poll() is None
    finally:
        for p in procs:
            p.kill()
            p.wait()
        cg.remove()
        release_all(leases)
