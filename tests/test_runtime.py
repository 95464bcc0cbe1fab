"""The solver runtime (``harnesslearn.runtime.SolverRuntime``) and model servers as child processes
(``harnesslearn.models.served``): whatever happens inside, the executor and the engine are closed and
the process ends."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from extras import require

from harnesslearn.errors import InfraError
from harnesslearn.models.served import ServerProcess, free_port
from harnesslearn.runtime import SolverRuntime

HERE = Path(__file__).resolve().parent
SOLVER = f"python:{HERE / 'zoo_solver.py'}:six"


def sandbox_workers() -> int:
    """Processes of this machine that are sandbox workers (fresh interpreters started with -I -S)."""
    n = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            n += b"-I" in cmd and b"-S" in cmd and any(b"sandboxed worker" in c for c in cmd)
    return n


def run_script(body: str, timeout: float) -> tuple[subprocess.CompletedProcess[str], float]:
    code = textwrap.dedent(body)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code, SOLVER], capture_output=True, text=True, timeout=timeout + 30)
    return p, time.monotonic() - t0


def test_an_exception_inside_the_runtime_with_64_slots_ends_the_process_within_15_s() -> None:
    before = sandbox_workers()
    p, took = run_script("""
        import asyncio, sys
        from harnesslearn.runtime import SolverRuntime

        async def main():
            async with SolverRuntime(sys.argv[1], concurrency=64) as rt:
                assert rt.executor.stats()["slots"] == 64
                raise RuntimeError("boom inside the runtime")

        asyncio.run(main())
    """, 15)
    assert p.returncode == 1 and "RuntimeError: boom inside the runtime" in p.stderr, p.stderr[-2000:]
    assert took < 15, f"the process took {took:.1f} s to end"
    assert "Task exception was never retrieved" not in p.stderr
    assert sandbox_workers() <= before  # nothing of the pool is left behind


def test_an_executor_left_open_by_its_caller_does_not_hang_the_interpreter_at_exit() -> None:
    """The hang of the first H200 run: an exception after a pool started, no close, and asyncio.run's
    final sweep cancelled spawns half-way (the pipes' waiters then never returned)."""
    before = sandbox_workers()
    p, took = run_script("""
        import asyncio, sys
        from harnesslearn.models import load_model
        from harnesslearn.sandbox import Executor, ExecutorConfig

        async def main():
            ex = Executor(load_model(sys.argv[1]), ExecutorConfig(concurrency=64))
            await ex.start()
            raise RuntimeError("boom, the executor never closed")

        asyncio.run(main())
    """, 15)
    assert p.returncode == 1 and "boom, the executor never closed" in p.stderr, p.stderr[-2000:]
    assert took < 15, f"the process took {took:.1f} s to end"
    time.sleep(0.5)
    assert sandbox_workers() <= before


def test_a_cancelled_caller_still_closes_the_executor_and_the_solver() -> None:
    closed: list[str] = []

    class Solver:
        spec = "fake:solver"

        async def generate(self, request):  # pragma: no cover - never called
            raise AssertionError

        async def aclose(self) -> None:
            closed.append("solver")

        def stats(self):
            return {}

    async def main() -> None:
        rt = SolverRuntime(Solver(), concurrency=4)  # type: ignore[arg-type]

        async def inside() -> None:
            async with rt:
                closed.append("open")
                await asyncio.sleep(60)

        task = asyncio.ensure_future(inside())
        await asyncio.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert rt.executor is None and rt.solver is None

    asyncio.run(main())
    assert closed == ["open", "solver"]


def test_a_failure_while_opening_closes_what_was_opened() -> None:
    closed: list[str] = []

    class Broken:
        spec = "fake:broken"

        async def generate(self, request):  # pragma: no cover
            raise AssertionError

        def warm(self) -> None:
            raise InfraError("the engine did not come up")

        async def aclose(self) -> None:
            closed.append("solver")

    async def main() -> None:
        with pytest.raises(InfraError, match="did not come up"):
            async with SolverRuntime(Broken()):  # type: ignore[arg-type]
                raise AssertionError("not reached")

    asyncio.run(main())
    assert closed == ["solver"]


def test_an_hf_solver_behind_the_response_cache_opens_and_runs(tmp_path: Path) -> None:
    """The second failure of the first H200 run: every hf: solver is wrapped in the response cache,
    and code that read backend attributes of the engine failed there."""
    require("transformers")
    from harnesslearn.evaluation import evaluate
    from harnesslearn.harness import load_harness
    from harnesslearn.models.cache import CachedBackend
    from harnesslearn.tasks import load_task
    from harnesslearn.transfer.smoke import tiny_qwen2

    model = tiny_qwen2(tmp_path / "model")
    rows = [{"id": f"q{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(8)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.environ["HARNESSLEARN_CACHE_DIR"] = str(tmp_path / "cache")
    task = load_task(f"jsonl:{tmp_path / 't.jsonl'}?scorer=exact")

    async def main() -> tuple[float | None, dict]:
        async with SolverRuntime(f"hf:{model}?max_batch=4", concurrency=2) as rt:
            assert isinstance(rt.solver, CachedBackend) and rt.executor is not None
            ev = await evaluate(load_harness("minimal"), task, "score", 2, 0, rt.executor, progress=False)
            again = await evaluate(load_harness("minimal"), task, "score", 2, 0, rt.executor, progress=False)
            assert [p.answer for p in again.problems] == [p.answer for p in ev.problems]
            return ev.completion_rate, rt.stats()

    rate, stats = asyncio.run(main())
    assert rate == 1.0 and stats["solver"]["cache_hits"] >= 2  # the second pass came from the cache


# ----------------------------------------------------------------------------- ServerProcess
SERVER = """
import http.server, sys, time
time.sleep(float(sys.argv[2]))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.end_headers()
        self.wfile.write(b'{"data": []}')
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_a_server_process_is_ready_when_it_answers_and_its_whole_group_stops(tmp_path: Path) -> None:
    port = free_port()
    s = ServerProcess([sys.executable, "-c", SERVER, str(port), "0.5"], port, log=tmp_path / "s.log")
    s.wait_ready(30)
    assert s.ready_s is not None and s.ready_s >= 0.5 and s.base_url == f"http://127.0.0.1:{port}/v1"
    pid = s.proc.pid  # type: ignore[union-attr]
    s.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_server_that_exits_or_never_answers_is_an_infrastructure_fault_with_its_log(tmp_path: Path) -> None:
    port = free_port()
    dead = ServerProcess([sys.executable, "-c", "import sys; print('no such model'); sys.exit(3)"], port,
                         log=tmp_path / "dead.log")
    with pytest.raises(InfraError, match="exited with code 3.*no such model"):
        dead.wait_ready(30)
    slow = ServerProcess([sys.executable, "-c", SERVER, str(port), "60"], port, log=tmp_path / "slow.log")
    with pytest.raises(InfraError, match="did not answer within 1 s"):
        slow.wait_ready(1)
    assert slow.proc is None  # stopped, not left running


def test_closing_an_hf_backend_stops_the_batch_in_flight(tmp_path: Path) -> None:
    require("transformers")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from harnesslearn.models import GenerateRequest, load_model
    from harnesslearn.transfer.smoke import tiny_qwen2

    model = tiny_qwen2(tmp_path / "model")
    m, tok = AutoModelForCausalLM.from_pretrained(model), AutoTokenizer.from_pretrained(model)
    # this model never ends a sequence by itself: its end tokens are suppressed
    m.generation_config.suppress_tokens = sorted({tok.eos_token_id, tok.pad_token_id,
                                                  *tok.convert_tokens_to_ids(["<|im_start|>", "<|endoftext|>"])})
    m.save_pretrained(model)

    async def main() -> float:
        b = load_model(f"hf:{model}", cache=False)
        long = asyncio.ensure_future(b.generate(GenerateRequest("def solve", max_tokens=20000)))  # greedy: it loops
        await asyncio.sleep(3.0)  # loading and generating
        assert not long.done()
        t0 = time.monotonic()
        await b.aclose()
        took = time.monotonic() - t0
        c = await asyncio.wait_for(long, 10)
        assert 0 < c.completion_tokens < 20000  # cut short, not run to its end
        return took

    assert asyncio.run(main()) < 5.0


def test_a_served_solver_takes_as_many_calls_in_flight_as_the_runtime_has_runs() -> None:
    """The solver client of an ``openai:`` runtime is limited by the runtime's concurrency, not the
    client's default of 32 (stretch 4 on the H200: 32 solver calls running while 96 contexts were in
    flight and the engine sat 80 % idle). A server that holds every answer for a moment sees them all."""
    from fault_proxy import FakeOpenAIServer

    from harnesslearn.models.base import GenerateRequest

    class Slow(FakeOpenAIServer):
        def __init__(self) -> None:
            super().__init__()
            self.now = self.peak = 0

        async def _handle(self, reader, writer) -> None:  # type: ignore[no-untyped-def]
            self.now += 1
            self.peak = max(self.peak, self.now)
            await asyncio.sleep(0.5)
            try:
                await super()._handle(reader, writer)
            finally:
                self.now -= 1

    server = Slow().start()
    try:
        async def go(concurrency: int | None) -> None:
            rt = SolverRuntime(f"openai:m?base_url={server.url}&endpoint=completions", concurrency=concurrency,
                               warm=False)
            assert rt.solver is not None
            try:
                await asyncio.gather(*(rt.solver.generate(GenerateRequest(f"q{concurrency} {i}")) for i in range(60)))
            finally:
                await rt.aclose()

        asyncio.run(go(60))
        assert server.peak == 60
        server.peak = 0
        asyncio.run(go(None))  # no runtime limit given: the client's own default
        assert server.peak == 32
    finally:
        server.stop()
