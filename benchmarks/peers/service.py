"""The driver's loopback HTTP service that every system in the comparison goes through.

Every route is under ``/run/KEY/``, KEY naming one (task, seed, system) in progress (``RunContext.key``):

- ``POST /run/KEY/eval/SYSTEM`` ``{"source", "split", "ids"}``: runs the harness ``source`` on those
  problems of ``split`` with OUR sandboxed evaluation (``harnesslearn.evaluation.evaluate``,
  the same executor and solver for every system) and returns the peer view of it
  (``common.peer_view``: gold answers on the feedback split only). The test split is refused:
  only the driver evaluates it, once, at the end. Ids not in the split are refused.
- ``POST /run/KEY/llm/SYSTEM/v1/chat/completions`` (and ``/completions``, ``GET .../models``): a
  counting proxy to the one ``llama_cpp.server``; the proposer of every system (ours included)
  is pointed here, so proposer calls and tokens are counted the same way for all, and a call
  over the proposer budget is refused (HTTP 429 with a reason) before it reaches the model.

Several runs may be in progress at once (the driver's ``--parallel``): ``Service.begin`` registers one under its
key and ``Service.end`` removes it; a request for a key not in progress, or for another system than the key's, is
refused (HTTP 409), so no run can spend another's budget or book its evaluations.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from common import BestTracker, Ledger, peer_view, slug

from harnesslearn.evaluation import Evaluation, evaluate
from harnesslearn.harness import Harness, check_source
from harnesslearn.sandbox import Budgets
from harnesslearn.tasks.base import Problem, Task


@dataclass
class RunContext:
    system: str
    task: Task
    seed: int
    splits: dict[str, list[Problem]]  # feedback and score problems of this (task, seed)
    budget: int  # proposer calls
    ledger: Ledger
    tracker: BestTracker
    sources_seen: dict[str, str | None] = field(default_factory=dict)  # harness id -> invalid reason
    sources: dict[str, str] = field(default_factory=dict)  # harness id -> source (every harness evaluated)
    infra_failures: int = 0

    @property
    def key(self) -> str:
        """The run's name in the service's URLs (and its work folder's): task, seed and system, URL-safe."""
        return f"{slug(self.task.spec)}-s{self.seed}-{slug(self.system)}"


class Service:
    def __init__(self, loop: asyncio.AbstractEventLoop, executor: Any, llm_url: str, budgets: Budgets) -> None:
        self.loop, self.executor, self.llm_url, self.budgets = loop, executor, llm_url.rstrip("/"), budgets
        self.runs: dict[str, RunContext] = {}  # the runs in progress, by key
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self) -> Service:
        self._thread.start()
        return self

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def begin(self, ctx: RunContext) -> None:
        with self._lock:
            if ctx.key in self.runs:
                raise RuntimeError(f"run {ctx.key} is already in progress")
            self.runs[ctx.key] = ctx

    def end(self, ctx: RunContext) -> None:
        with self._lock:
            self.runs.pop(ctx.key, None)

    def run_url(self, ctx: RunContext) -> str:
        """The service as one run sees it: its evaluations go to ``/eval/SYSTEM`` under this URL."""
        return f"{self.url}/run/{ctx.key}"

    def llm_base(self, ctx: RunContext) -> str:
        return f"{self.run_url(ctx)}/llm/{ctx.system}/v1"

    def _ctx(self, key: str, system: str) -> RunContext | None:
        with self._lock:
            ctx = self.runs.get(key)
        return ctx if ctx is not None and ctx.system == system else None

    # ------------------------------------------------------------------ evaluation
    async def run_eval(self, ctx: RunContext, harness: Harness, split: str, problems: list[Problem]) -> Evaluation:
        """Evaluate for ``ctx``'s system (also used directly by our own adapt's evaluate_fn) and
        book it: the ledger, the score-split best tracker, the validity of the source."""
        ev = await evaluate(harness, ctx.task, split, len(problems), ctx.seed, self.executor, self.budgets,
                            progress=False, problems=problems)
        ctx.ledger.add_evaluation(ev.solver_calls, ev.tokens, len(problems), ev.wall_s)
        ctx.infra_failures += ev.infra_failures
        ctx.sources_seen.setdefault(harness.id, check_source(harness.source))
        ctx.sources.setdefault(harness.id, harness.source)
        if split == "score":
            ctx.tracker.record(ctx.ledger.proposer_calls, ev.J, harness.id, harness.source, len(problems))
        return ev

    def handle_eval(self, key: str, system: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        ctx = self._ctx(key, system)
        if ctx is None:
            return 409, {"error": f"no run {key} of {system} in progress"}
        split = body.get("split")
        if split not in ctx.splits:
            return 403, {"error": f"split {split!r} is not available to the systems (feedback and score only)"}
        by_id = {p.id: p for p in ctx.splits[split]}
        ids = body.get("ids")
        if ids is None:
            probs = list(ctx.splits[split])
        else:
            missing = [i for i in ids if i not in by_id]
            if missing:
                return 403, {"error": f"ids not in the {split} split: {missing[:3]}"}
            probs = [by_id[i] for i in ids]
        source = str(body.get("source", ""))
        h = Harness(source)
        ev = asyncio.run_coroutine_threadsafe(self.run_eval(ctx, h, split, probs), self.loop).result()
        rows = []
        for p in ev.problems:
            d = p.to_json()
            d["question"], d["gold"] = p.question, p.gold
            d["score"] = 0.0 if p.score is None else p.score
            rows.append(d)
        return 200, {"J": ev.J or 0.0, "n": ev.n, "harness_id": h.id, "invalid_reason": check_source(source),
                     "problems": peer_view(split, rows)}

    # ------------------------------------------------------------------ proposer proxy
    def handle_llm(self, key: str, system: str, rest: str, body: bytes | None) -> tuple[int, bytes]:
        ctx = self._ctx(key, system)
        if ctx is None:
            return 409, json.dumps({"error": {"message": f"no run {key} of {system} in progress"}}).encode()
        if body is None:  # GET models
            return self._forward(rest, None)[:2]
        with self._lock:
            if ctx.ledger.proposer_calls >= ctx.budget:
                ctx.ledger.proposer_refused += 1
                msg = f"proposer budget of {ctx.budget} calls spent (refused by the benchmark proxy)"
                return 429, json.dumps({"error": {"message": msg, "type": "budget"}}).encode()
            ctx.ledger.proposer_calls += 1  # booked before the call: the budget holds under concurrency
        t0 = time.perf_counter()
        code, data = self._forward(rest, body)
        dt = time.perf_counter() - t0
        with self._lock:
            try:
                usage = json.loads(data).get("usage") or {}
            except (ValueError, AttributeError):
                usage = {}
            if code != 200:
                ctx.ledger.proposer_calls -= 1  # a failed call is not a proposal
            else:
                ctx.ledger.proposer_calls -= 1
                ctx.ledger.add_proposer(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
                                        dt)
        return code, data

    def _forward(self, rest: str, body: bytes | None) -> tuple[int, bytes]:
        req = urllib.request.Request(f"{self.llm_url}/{rest}", data=body, method="POST" if body is not None else "GET",
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=1800) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError as e:
            return 502, json.dumps({"error": {"message": f"model server unreachable: {e}"}}).encode()


def _handler(svc: Service) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, code: int, data: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self, body: bytes | None) -> None:
            parts = self.path.strip("/").split("/", 4)  # run, KEY, eval|llm, SYSTEM[, v1/...]
            try:
                if len(parts) == 4 and parts[0] == "run" and parts[2] == "eval" and body is not None:
                    code, out = svc.handle_eval(parts[1], parts[3], json.loads(body or b"{}"))
                    self._send(code, json.dumps(out).encode())
                elif len(parts) == 5 and parts[0] == "run" and parts[2] == "llm" and parts[4].startswith("v1/"):
                    code, data = svc.handle_llm(parts[1], parts[3], parts[4][3:], body)
                    self._send(code, data)
                else:
                    self._send(404, b'{"error": "not found"}')
            except Exception as e:  # noqa: BLE001 - reported to the caller, never a silent 0
                self._send(500, json.dumps({"error": f"{type(e).__name__}: {e}"}).encode())

        def do_GET(self) -> None:  # noqa: N802
            self._route(None)

        def do_POST(self) -> None:  # noqa: N802
            n = int(self.headers.get("Content-Length") or 0)
            self._route(self.rfile.read(n))

    return H
