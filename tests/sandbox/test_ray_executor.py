"""The Ray executor on a real local Ray instance: the same J and answers as the local executor,
search and python tools on the nodes, distinct sandbox slots per actor, a node that fails its
preflight refuses work, and the CLI's one-line errors (unreachable address, ray missing).

Node and endpoint deaths mid-run are in test_ray_faults.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from extras import needs
from llama_server import free_port

from harnesslearn.errors import UserError
from harnesslearn.evaluation import evaluate
from harnesslearn.harness import Harness, load_harness
from harnesslearn.models import load_model
from harnesslearn.sandbox import (
    Budgets,
    Executor,
    ExecutorConfig,
    IsolationError,
    RayConfig,
    RayExecutor,
    parse_executor,
)
from harnesslearn.tasks import load_task

HERE = Path(__file__).resolve().parents[1]  # tests/: the helper modules
SOLVER = f"python:{HERE / 'ray_solvers.py'}:arith"
NEEDS_RAY = needs("ray", "ray")


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 << 20, log_to_driver=False,
             logging_level="ERROR")
    yield ray
    ray.shutdown()


def evaluate_both(harness, task, split, n, ray_config, config=None):
    """(local Evaluation, Ray Evaluation, Ray executor stats, the Ray actors' leased uids)."""
    solver = load_model(SOLVER)

    async def main():
        try:
            async with Executor(solver, config or ExecutorConfig(concurrency=2)) as ex:
                local = await evaluate(harness, task, split, n, 0, ex, budgets=Budgets(timeout_s=20), progress=False)
            rex = RayExecutor(solver, config or ExecutorConfig(), ray_config)
            async with rex:
                remote = await evaluate(harness, task, split, n, 0, rex, budgets=Budgets(timeout_s=20), progress=False)
                uids = [a.info.get("uids", []) for a in rex._actors]
                return local, remote, rex.stats(), uids
        finally:
            await solver.aclose()

    return asyncio.run(main())


def same_results(a, b):
    assert a.J == b.J and a.completion_rate == b.completion_rate
    assert [(p.id, p.status, p.answer, p.score, p.calls, p.tokens) for p in a.problems] == [
        (p.id, p.status, p.answer, p.score, p.calls, p.tokens) for p in b.problems]
    # every call record, tool calls included (kind, request, response, tokens, error; not the timing)
    def records(ev):
        return [[(c.kind, c.request, c.response, c.prompt_tokens, c.completion_tokens, c.error)
                 for c in p.record.calls] for p in ev.problems]

    assert records(a) == records(b)


@NEEDS_RAY
def test_ray_gives_the_local_j_and_answers_and_spreads_over_actors(local_ray):
    task = load_task("rg:basic_arithmetic")
    local, remote, stats, uids = evaluate_both(load_harness("minimal"), task, "score", 10,
                                               RayConfig(actors=2, slots_per_actor=2, actor_cpus=0.5))
    same_results(local, remote)
    assert 0 < remote.J < 1 and remote.infra_failures == 0  # a real mix of right and wrong answers
    assert stats["executor"] == "ray" and len(stats["actors"]) == 2 and stats["redispatched"] == 0
    assert all(a["problems"] > 0 for a in stats["actors"]) and sum(a["problems"] for a in stats["actors"]) == 10
    if os.geteuid() == 0:  # per-slot uids: two actors on one machine never share one
        flat = [u for us in uids for u in us]
        assert len(flat) == 2 * (2 + 1) * 2 and len(set(flat)) == len(flat)  # actors x (slots + spare) x 2 uids


@NEEDS_RAY
def test_runs_that_start_an_executor_concurrently_share_one_start(local_ray):
    task, harness = load_task("rg:basic_arithmetic"), load_harness("minimal")
    solver = load_model(SOLVER)

    async def main():
        rex = RayExecutor(solver, ExecutorConfig(), RayConfig(actors=1, slots_per_actor=2, actor_cpus=0.5))
        try:
            return await asyncio.gather(*(evaluate(harness, task, split, 3, 0, rex, progress=False)
                                          for split in ("feedback", "score", "test"))), rex.stats()
        finally:
            await rex.aclose()

    evs, stats = asyncio.run(main())
    assert all(e.infra_failures == 0 and e.n == 3 for e in evs)
    assert len(stats["actors"]) == 1 and stats["actors"][0]["problems"] == 9


QA_HARNESS = '''
def solve(model, question):
    docs = model.search(question, k=3)
    out = model.python("print(6 * 7)")
    prompt = "\\n".join(d["title"] + ": " + d["text"] for d in docs) + "\\nQuestion: " + question + "\\nAnswer:"
    return model(prompt, max_tokens=16).strip() + " | " + docs[0]["title"] + " | " + out.strip()
'''


def qa_files(tmp_path: Path) -> tuple[Path, Path]:
    rows = []
    for i in range(24):
        paragraphs = [{"title": f"Doc {i}-{j}", "text": f"Item {i} has value {i * 10 + j} and colour c{j}.",
                       "is_supporting": j == 0} for j in range(4)]
        rows.append({"id": f"q{i}", "question": f"What value does item {i} have in 3 + {i}?",
                     "answers": [str(i * 10)], "paragraphs": paragraphs})
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    corpus = tmp_path / "corpus.jsonl"  # more documents than travel inline: it goes to the object store once
    corpus.write_text("".join(json.dumps({"title": f"Page {k}", "text": f"Item {k} is kept in room {k % 7}."}) + "\n"
                              for k in range(150)))
    return data, corpus


@NEEDS_RAY
@pytest.mark.parametrize("with_corpus", [False, True])
def test_search_and_python_tools_work_on_the_nodes(local_ray, tmp_path, with_corpus):
    data, corpus = qa_files(tmp_path)
    task = load_task(f"musique:{data}" + (f"?corpus={corpus}" if with_corpus else ""))
    harness = Harness(source=QA_HARNESS, name="qa-tools")
    local, remote, _, _ = evaluate_both(harness, task, "test", 6, RayConfig(actors=1, slots_per_actor=3, actor_cpus=0.5))
    same_results(local, remote)
    assert all(p.status == "ok" and p.answer.endswith("| 42") for p in remote.problems)
    kinds = [[c.kind for c in p.record.calls] for p in remote.problems]
    assert all(k.count("search") == 1 and k.count("python") == 1 and k.count("model") == 1 for k in kinds), kinds
    titles = {p.answer.split(" | ")[1] for p in remote.problems}
    assert all(t.startswith("Page" if with_corpus else "Doc") for t in titles)


@NEEDS_RAY
def test_a_node_where_the_sandbox_cannot_start_refuses_work(local_ray):
    """Preflight runs on every node: a worker interpreter that is no Python (here /usr/bin/true)
    fails it, the node refuses work, and with no node left starting fails with IsolationError."""
    solver = load_model(SOLVER)

    async def main():
        rex = RayExecutor(solver, ExecutorConfig(python="/usr/bin/true", start_timeout_s=5),
                          RayConfig(actors=1, actor_cpus=0.5))
        try:
            await rex.start()
        finally:
            await rex.aclose()

    with pytest.raises(IsolationError, match="no Ray node can run harnesses in a sandbox"):
        asyncio.run(main())


def test_executor_option_is_parsed_strictly():
    assert parse_executor("local") == ("local", None)
    assert parse_executor("ray") == ("ray", None)
    assert parse_executor("ray:auto") == ("ray", "auto")
    assert parse_executor("ray:10.0.0.5:6379") == ("ray", "10.0.0.5:6379")
    assert parse_executor("ray://head:10001") == ("ray", "ray://head:10001")
    assert parse_executor("shards:4") == ("shards", "4")
    for bad in ("", "Ray", "ray:", "ray://", "dask", "local:x", "ray:head", "ray://head", "ray:head:x", "ray://auto",
                "shards", "shards:0", "shards:x", "shards:-1", "shards:1000"):
        with pytest.raises(UserError):
            parse_executor(bad)


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harnesslearn.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


RUN = ("run", "minimal", "--task", "rg:basic_arithmetic", "--solver", SOLVER, "--n", "6", "--json")


@pytest.mark.parametrize("option, message", [
    ("dask", "unknown executor 'dask'"),
    (f"ray:127.0.0.1:{free_port()}", "cannot reach a Ray cluster at 127.0.0.1"),
    (f"ray://127.0.0.1:{free_port()}", "cannot reach a Ray cluster at ray://127.0.0.1"),
])
def test_cli_bad_executor_is_exit_2_and_one_line(option, message):
    r = cli(*RUN, "--executor", option)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and message in r.stderr and "Traceback" not in r.stderr


def test_cli_without_ray_installed_is_exit_2_and_one_line(tmp_path):
    fake = tmp_path / "ray"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('No module named ray (hidden by the test)')\n")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    r = cli(*RUN, "--executor", "ray", env={"PYTHONPATH": path})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "pip install 'harnesslearn[ray]'" in r.stderr


@NEEDS_RAY
@pytest.mark.parametrize("executor", ["ray", "shards:2"])
def test_cli_run_on_ray_gives_the_same_j_and_answers_as_local(executor):
    """The must-hold: `run ... --executor ray --json` equals `run ... --json` for a deterministic solver; so does
    `--executor shards:2` (two trusted processes, each calling its own solver client)."""
    local, remote = cli(*RUN), cli(*RUN, "--executor", executor, "--concurrency", "2")
    assert local.returncode == 0, local.stderr[-2000:]
    assert remote.returncode == 0, remote.stderr[-2000:]
    a, b = json.loads(local.stdout), json.loads(remote.stdout)
    assert a["J"] == b["J"] and 0 < b["J"] < 1
    assert [(p["id"], p["answer"], p["score"], p["status"]) for p in a["problems"]] == [
        (p["id"], p["answer"], p["score"], p["status"]) for p in b["problems"]]
    assert a["executor"]["executor"] == "local" and b["executor"]["executor"] == "ray"
    if executor == "ray":  # the driver served every call
        assert a["model_stats"]["calls"] == b["model_stats"]["calls"] == 6
        assert b["executor"]["nodes"] == 1 and b["executor"]["actors"][0]["problems"] == 6
    else:  # each shard served its own
        assert b["executor"]["solver"] == "each actor's own" and len(b["executor"]["actors"]) == 2
        assert sum(x["problems"] for x in b["executor"]["actors"]) == 6


ADAPT_MODELS = '''
EDIT = """<<<<<<< SEARCH
    prompt = f"Question: {question}\\\\nAnswer:"
    completion = model(prompt, max_tokens=64, temperature=0.0, stop=["\\\\n"])
    return completion.strip()
=======
    import re
    a, b = re.findall(r"-?\\\\d+", question)[:2]
    return str(int(a) + int(b))
>>>>>>> REPLACE
"""

def garbage(prompt, **kw):
    return "banana"

def compute(prompt, **kw):
    return "I will compute it.\\n" + EDIT
'''


@NEEDS_RAY
def test_cli_adapt_on_ray_gives_the_same_result_as_local(local_ray, tmp_path):
    (tmp_path / "models.py").write_text(ADAPT_MODELS)
    with (tmp_path / "arith.jsonl").open("w") as f:
        for i in range(60):
            f.write(json.dumps({"id": f"q{i}", "question": f"What is {i} + {2 * i}?", "answer": str(3 * i)}) + "\n")
    m = tmp_path / "models.py"

    def adapt(run_dir: str, *extra: str) -> dict:
        r = cli("adapt", "--task", f"jsonl:{tmp_path / 'arith.jsonl'}", "--solver", f"python:{m}:garbage",
                "--proposer", f"python:{m}:compute", "--rounds", "1", "--candidates", "1", "--n-feedback", "3",
                "--n-score", "5", "--n-test", "6", "--run-dir", str(tmp_path / run_dir), "--json", *extra)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout)

    address = local_ray.get_runtime_context().gcs_address  # this module's Ray instance, by its address
    local, remote = adapt("local"), adapt("ray", "--executor", f"ray:{address}")
    for key in ("seed_score_J", "seed_test_J", "score_J", "test_J", "best_harness_id", "proposals", "valid_proposals",
                "solver_calls"):
        assert local[key] == remote[key], key
    assert remote["test_J"] == 1.0 and remote["seed_test_J"] == 0.0


@NEEDS_RAY
def test_grpo_opens_its_executor_on_ray_and_uses_it_from_its_loop_thread(local_ray):
    """Training's reward loop runs on a private event-loop thread: the Ray executor connects in the
    calling thread and serves every evaluation from that loop."""
    from harnesslearn.training.config import GRPOTrainConfig, build_config
    from harnesslearn.training.grpo import LoopThread, _open_runtime

    cfg = build_config(GRPOTrainConfig, {"solver": SOLVER, "runtime.executor": "ray", "runtime.concurrency": 2})
    runner = LoopThread()
    rt = _open_runtime(cfg, runner)
    ex = rt.executor
    try:
        ev = runner.run(evaluate(load_harness("minimal"), load_task("rg:basic_arithmetic"), "score", 4, 0, ex,
                                 progress=False))
        assert type(ex).__name__ == "RayExecutor" and ev.infra_failures == 0 and ev.n == 4
        assert ex.stats()["actors"][0]["slots"] == 2
    finally:
        runner.run(rt.aclose())
        runner.close()


def test_training_config_rejects_a_bad_executor():
    from harnesslearn.training.config import GRPOTrainConfig, build_config

    with pytest.raises(UserError, match="unknown executor"):
        build_config(GRPOTrainConfig, {"runtime.executor": "spark"})
    cfg = build_config(GRPOTrainConfig, {"runtime.executor": "ray:auto",
                                         "solver_base_url": ["http://a:1/v1", "http://b:2/v1"]})
    assert cfg.runtime.executor == "ray:auto" and cfg.solver_base_url == ("http://a:1/v1", "http://b:2/v1")


@NEEDS_RAY
def test_shards_give_the_local_j_and_answers_with_each_shard_calling_its_own_solver(local_ray):
    """``shards:K``: K executor actors on this machine, each with its own solver client built from the spec,
    so no model call passes through the driver; results equal the local executor's."""
    from harnesslearn.sandbox import build_executor

    task = load_task("rg:basic_arithmetic")
    harness = load_harness("minimal")
    solver = load_model(SOLVER)

    async def main():
        try:
            async with Executor(solver, ExecutorConfig(concurrency=2)) as ex:
                local = await evaluate(harness, task, "score", 10, 0, ex, budgets=Budgets(timeout_s=20), progress=False)
            sharded = build_executor("shards:2", solver, ExecutorConfig(), concurrency=4, solver_source=(SOLVER, {}))
            async with sharded:
                remote = await evaluate(harness, task, "score", 10, 0, sharded, budgets=Budgets(timeout_s=20),
                                        progress=False)
                return local, remote, sharded.stats()
        finally:
            await solver.aclose()

    local, remote, stats = asyncio.run(main())
    same_results(local, remote)
    assert 0 < remote.J < 1
    assert stats["solver"] == "each actor's own" and len(stats["actors"]) == 2
    assert all(a["slots"] == 2 for a in stats["actors"]) and sum(a["problems"] for a in stats["actors"]) == 10
    assert solver.stats()["calls"] == 10  # the local run's calls only: the shards called their own clients


def test_shards_refuse_a_solver_they_cannot_rebuild():
    from harnesslearn.sandbox import build_executor

    with pytest.raises(UserError, match="openai: or python:"):
        build_executor("shards:2", load_model(SOLVER), solver_source=("local:gemma-3-270m", {}))
    with pytest.raises(UserError, match="openai: or python:"):
        build_executor("shards:2", load_model(SOLVER))  # a backend object without its spec

