"""The public hostile suite through one Executor: one property per test.

All hostile harnesses run once, concurrently, in a module fixture (small timeouts keep it
fast); each test then checks its harness's status and score 0, plus the suite-wide
properties: no process of any slot uid survives, host files are unchanged, the executor's
memory stayed bounded, and a normal run afterwards succeeds.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import resource
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest

from harnesslearn.evaluation import score_records, task_tools
from harnesslearn.models.base import Completion, GenerateRequest, ModelBackend
from harnesslearn.sandbox import Budgets, Executor, ExecutorConfig, RunRecord, Status
from harnesslearn.sandbox.launcher import children_of, processes_of_uid
from harnesslearn.tasks import load_task

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hostile_harnesses import H  # noqa: E402

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the sandbox is Linux-only")

LONG = {"python_tool_hostile_code": 15.0, "flood_model_from_threads": 10.0, "fork_then_fill_memory": 30.0}


class WrongModel(ModelBackend):
    """A solver that always answers the same wrong thing."""

    spec = "test:wrong"

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, request: GenerateRequest) -> Completion:
        self.calls += 1
        await asyncio.sleep(0.001)
        return Completion(texts=["not the answer"] * request.n, prompt_tokens=5, completion_tokens=3)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _tree_digest(d: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(d.rglob("*")):
        h.update(str(p).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


async def _survivors(ex: Executor) -> list[int]:
    """Processes of the executor's slot uids other than each slot's fresh pre-started worker
    (checked while the executor still holds the uids: afterwards another executor may lease them)."""
    out = []
    for slot in ex._slots:
        assert slot.pending is not None
        fresh = await slot.pending
        allowed = {fresh.proc.pid, *children_of(fresh.proc.pid)} if fresh else set()
        for uid in (slot.uid, slot.tool_uid):
            if uid is not None:
                out += [pid for pid in processes_of_uid(uid) if pid not in allowed]
    return out


def _fill(source: str, ctx: dict[str, str]) -> str:
    for k, v in ctx.items():
        source = source.replace(k, v)
    return source


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("hostile")
    os.chmod(base, 0o755)
    write_dir = base / "host_dir"
    write_dir.mkdir()
    os.chmod(write_dir, 0o777)  # world-writable on purpose: only the sandbox stands in the way
    canary = write_dir / "canary.txt"
    canary_secret = "CANARY-" + secrets.token_hex(12)
    canary.write_text(canary_secret)
    os.chmod(canary, 0o666)
    golds = [secrets.token_hex(12) for _ in range(60)]
    keyfile = base / "key.jsonl"
    keyfile.write_text("".join(json.dumps({"id": f"k{i}", "question": f"What is item {i}?", "answer": g}) + "\n"
                               for i, g in enumerate(golds)))
    os.chmod(keyfile, 0o644)
    env_name, env_secret = "HL_HOSTILE_SECRET", "ENVSECRET-" + secrets.token_hex(12)
    os.environ[env_name] = env_secret
    task = load_task(f"jsonl:{keyfile}")
    problem = task.problems("score", 1, 0)[0]
    ctx = {"CANARY": str(canary), "WRITE_DIR": str(write_dir), "KEYFILE": str(keyfile), "SECRET_ENV": env_name}
    runtime_file = Path("/usr/lib/python3.11/os.py")
    runtime_digest = hashlib.sha256(runtime_file.read_bytes()).hexdigest()
    host_digest = _tree_digest(write_dir)
    model = WrongModel()

    async def go() -> dict[str, Any]:
        config = ExecutorConfig(concurrency=8, python_tool_timeout_s=1.0)
        async with Executor(model, config) as ex:
            rss0 = _rss_mb()

            async def one(name: str) -> tuple[str, RunRecord]:
                budgets = Budgets(timeout_s=LONG.get(name, 2.5), memory_mb=512)
                rec = await ex.run(_fill(H[name][0], ctx), [problem], task_tools(task), budgets)
                return name, rec[0]

            results = dict(await asyncio.gather(*(one(name) for name in H)))
            rss1 = _rss_mb()
            persist = ("import os\ndef solve(model, question):\n    seen = os.path.exists('/tmp/cache.txt')\n"
                       "    open('/tmp/cache.txt', 'w').write('x')\n    return 'seen' if seen else 'fresh'\n")
            persisted = [(await ex.run(persist, [problem], task_tools(task), Budgets(timeout_s=5)))[0] for _ in range(3)]
            follow = await ex.run("def solve(model, question):\n    return model(question)\n",
                                  task.problems("score", 4, 0), task_tools(task), Budgets(timeout_s=10))
            survivors = await _survivors(ex)
            cgroups = all(slot.cgroup is not None for slot in ex._slots)
        return {"cgroups": cgroups, "results": results, "rss": (rss0, rss1), "persisted": persisted, "follow": follow,
                "survivors": survivors}

    try:
        out = asyncio.run(go())
    finally:
        del os.environ[env_name]
    out.update(task=task, problem=problem, golds=golds, canary=canary, canary_secret=canary_secret,
               env_secret=env_secret, write_dir=write_dir, host_digest=host_digest,
               runtime_file=runtime_file, runtime_digest=runtime_digest)
    return out


def _check_common(suite: dict[str, Any], name: str) -> RunRecord:
    rec: RunRecord = suite["results"][name]
    scored = score_records(suite["task"], [suite["problem"]], [rec])[0]
    assert scored.score == 0.0, (name, rec)
    evidence = f"{rec.answer}\n{rec.stdout}\n{rec.stderr}\n{rec.error}"
    for secret in [suite["canary_secret"], suite["env_secret"], *suite["golds"]]:
        assert secret not in evidence, (name, "leaked a secret")
    assert _tree_digest(suite["write_dir"]) == suite["host_digest"], "host files changed"
    assert suite["canary"].read_text() == suite["canary_secret"]
    assert hashlib.sha256(suite["runtime_file"].read_bytes()).hexdigest() == suite["runtime_digest"]
    assert suite["survivors"] == [], "a process of a slot uid survived its run"
    rss0, rss1 = suite["rss"]
    assert rss1 - rss0 < 300, f"executor memory grew by {rss1 - rss0:.0f} MB"
    assert all(r.status == Status.OK for r in suite["follow"]), "the next run did not succeed"
    return rec


@pytest.mark.parametrize("name", sorted(H))
def test_hostile_harness_is_contained(suite: dict[str, Any], name: str) -> None:
    rec = _check_common(suite, name)
    assert str(rec.status) in H[name][1], f"{name}: status {rec.status} ({rec.error})"


def test_syntax_error_keeps_a_traceback(suite: dict[str, Any]) -> None:
    rec = suite["results"]["syntax_error"]
    assert rec.error and "SyntaxError" in rec.error


def test_network_sockets_are_denied(suite: dict[str, Any]) -> None:
    seen = json.loads(_check_common(suite, "sockets_of_every_kind").answer or "{}")
    for family in ("inet", "inet_udp", "inet6", "netlink", "packet", "vsock", "bluetooth"):
        assert seen[family] == "denied", (family, seen)
    assert "connected" not in seen.values(), seen


def test_privileged_syscalls_are_denied(suite: dict[str, Any]) -> None:
    seen = json.loads(_check_common(suite, "privileged_syscalls").answer or "{}")
    assert seen and set(seen.values()) == {"denied"}, seen


def test_runtime_and_site_packages_are_read_only(suite: dict[str, Any]) -> None:
    seen = json.loads(_check_common(suite, "write_runtime_and_site_packages").answer or "{}")
    assert seen.get("/usr/lib/python3.11/os.py") == "denied"
    assert not Path("/usr/lib/python3.11/hl_injected.py").exists()
    assert not (suite["write_dir"] / "injected.py").exists()


def test_python_tool_contains_hostile_code(suite: dict[str, Any]) -> None:
    rec = _check_common(suite, "python_tool_hostile_code")
    seen = json.loads(rec.answer or "{}")
    assert seen["fine"].strip() == "42"
    for name in ("canary", "socket", "loop", "memory", "segfault", "exit", "write", "unshare"):
        assert seen[name].startswith("Error"), (name, seen[name])
    assert not (suite["write_dir"] / "from_tool").exists()
    assert sum(1 for c in rec.calls if c.kind == "python") == 12


def test_model_flood_hits_the_call_budget(suite: dict[str, Any]) -> None:
    rec = _check_common(suite, "flood_model_from_threads")
    assert rec.n_calls <= Budgets().max_calls


def test_printing_gigabytes_is_capped(suite: dict[str, Any]) -> None:
    rec = _check_common(suite, "print_gigabytes")
    assert len(rec.stdout) < 200_000 and len(rec.stderr) < 200_000


def test_no_cache_persists_across_runs(suite: dict[str, Any]) -> None:
    assert [r.answer for r in suite["persisted"]] == ["fresh"] * 3


def test_parent_survives_kill_attempts(suite: dict[str, Any]) -> None:
    rec = _check_common(suite, "kill_parent_and_everyone")
    assert rec.status == Status.OK and rec.answer == "still here"  # its SIGKILLs reached nothing of ours
    assert rec.wall_s < 2.5  # it ended by itself: nothing outside the sandbox was killed or waited on


def test_slot_memory_is_capped_across_processes(suite: dict[str, Any]) -> None:
    """Six children of 300 MB (each under the per-process limit) cannot all fit in the slot's
    cgroup cap of 1344 MB: the OOM killer kills at least two of them (the harness counts the
    SIGKILLs), or it kills the harness itself (status memory, said to be the OOM killer)."""
    if not suite["cgroups"]:
        pytest.skip("cgroup v1 memory controller not writable here: only per-process rlimits apply")
    rec = _check_common(suite, "fork_then_fill_memory")
    if rec.status == Status.OK:
        assert rec.answer is not None and int(rec.answer.rsplit(" ", 1)[1]) >= 2, (rec.answer, rec.stderr[-2000:])
    else:
        assert rec.status == Status.MEMORY and "out-of-memory" in (rec.error or ""), rec


@pytest.mark.parametrize("name,evidence", [
    ("blocked_stdin", "EOFError"),  # stdin is /dev/null, never a terminal or a pipe from us
    ("thread_bomb", "can't start new thread"),  # the process limit stops it, not the machine
    ("disk_fill", "OSError"),  # the file size limit or the tmpfs size, not the host disk
])
def test_harness_errors_come_from_the_limit_they_hit(suite: dict[str, Any], name: str, evidence: str) -> None:
    rec = _check_common(suite, name)
    assert rec.status == Status.HARNESS_ERROR and evidence in (rec.error or ""), rec


def test_each_way_a_run_can_end_has_its_evidence(suite: dict[str, Any]) -> None:
    """For the harnesses that may end in more than one way (a race between a limit and the
    clock), whichever way it ended says why."""
    for name in ("slow_leak", "deep_c_recursion", "inode_fill"):
        rec = _check_common(suite, name)
        why = rec.error or ""
        if rec.status == Status.TIMEOUT:
            assert "no result within" in why or "CPU time limit" in why, (name, rec)
        elif rec.status == Status.MEMORY:
            assert "MemoryError" in why or "out-of-memory" in why, (name, rec)
        else:
            assert rec.status == Status.HARNESS_ERROR and "OSError" in why, (name, rec)
