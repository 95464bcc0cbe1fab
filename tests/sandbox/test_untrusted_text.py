"""Untrusted text never crashes the trusted side (issue 65, item 1): whatever frame a harness sends (lone
surrogates, NUL, huge integers, invalid UTF-8, any nesting), the broker ends the problem with a status, the
store saves and loads the problem, and ``--json`` prints it, none of them raising."""

from __future__ import annotations

import asyncio
import io
import json
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harnesslearn.cli.app import emit
from harnesslearn.evaluation import Evaluation, ProblemResult
from harnesslearn.harness import Harness, seed_source
from harnesslearn.models.base import Completion, GenerateRequest, ModelBackend
from harnesslearn.sandbox.broker import Broker
from harnesslearn.sandbox.launcher import Worker
from harnesslearn.sandbox.records import Budgets, CallRecord, RunRecord, Status
from harnesslearn.store import Store

NONCE = "n0nce"
TEXT = st.text(st.characters(exclude_categories=()), max_size=12) | st.sampled_from(
    ["3\ud800", "\udfff", "a\x00b", "\x1b[2J", "\ud83d\ude00", ""])
SCALAR = st.none() | st.booleans() | st.floats(allow_nan=False) | TEXT | st.integers() | st.sampled_from(
    [10**4000, -(10**4299), 2**63, 2**64 + 1])
JSONISH = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                       max_leaves=8)
FRAME = st.fixed_dictionaries(
    {"type": st.sampled_from(["result", "error", "call"]) | TEXT},
    optional={"answer": JSONISH, "kind": st.sampled_from(["model", "python", "search", "bad_result"]) | JSONISH,
              "traceback": JSONISH, "id": JSONISH, "request": JSONISH | st.fixed_dictionaries(
                  {"prompt": TEXT | st.lists(st.fixed_dictionaries({"role": TEXT, "content": TEXT}), max_size=2)},
                  optional={"n": SCALAR, "max_tokens": SCALAR, "seed": SCALAR, "stop": JSONISH})})
RAW = st.sampled_from([b"\xff\xfe", b'{"type": "result", "answer": "\xed\xa0\x80"}', b'{"a": ' + b"9" * 5000 + b"}",
                       b"[" * 5000, b'{"type": "result", "answer": NaN}'])


class _Text(ModelBackend):
    spec = "test:text"

    async def generate(self, request: GenerateRequest) -> Completion:  # echoes, surrogates included
        text = request.prompt if isinstance(request.prompt, str) else request.prompt[-1]["content"]
        return Completion(texts=[text + "\ud800"], prompt_tokens=2**40, completion_tokens=1)


class _Sink:
    def __init__(self) -> None:
        self.data = b""

    def write(self, b: bytes) -> None:
        self.data += b

    async def drain(self) -> None:
        pass


def _frame_bytes(frame: dict[str, Any] | bytes) -> bytes:
    if isinstance(frame, bytes):
        data = frame
    else:  # ensure_ascii: a lone surrogate travels as the JSON escape a harness can write
        data = json.dumps({**frame, "nonce": NONCE}).encode("ascii")
    return struct.pack(">I", len(data)) + data


async def _serve(frames: list[dict[str, Any] | bytes]) -> tuple[Status | None, str | None, str | None, Broker]:
    reader = asyncio.StreamReader()
    reader.feed_data(b"".join(_frame_bytes(f) for f in frames))
    asyncio.get_running_loop().call_later(0.02, reader.feed_eof)  # the call handlers answer first
    worker = Worker(proc=None, reader=reader, writer=_Sink(), nonce=NONCE, uid=None,  # type: ignore[arg-type]
                    max_frame=1 << 20)

    async def python_tool(code: str, timeout: float) -> str:
        return code + "\ud800"

    async def search_tool(query: str, k: int) -> list[dict[str, str]]:
        return [{"title": query, "text": "\x00"}]

    broker = Broker(_Text(), Budgets(), asyncio.Semaphore(4), python_tool, search_tool, ("python", "search"), 1000)
    out = await asyncio.wait_for(broker.serve(worker), 10)
    sent = worker.writer.data  # type: ignore[attr-defined]
    while sent:  # every frame sent to the worker decodes there (worker.py's Channel.recv)
        (n,) = struct.unpack(">I", sent[:4])
        json.loads(sent[4:4 + n].decode("utf-8"))
        sent = sent[4 + n:]
    return out.status, out.answer, out.error, broker


def _save_load_print(status: Status | None, answer: str | None, error: str | None, calls: list[CallRecord],
                     question: str) -> None:
    rec = RunRecord("p\ud800", status or Status.CRASH, answer=answer, error=error, calls=calls)
    p = ProblemResult(id="p\ud800", question=question, gold=[question, 2**70], score=0.0, details={},
                      status=str(rec.status), answer=answer, calls=len(calls), tokens=1, wall_s=0.0, error=error,
                      record=rec)
    h = Harness(seed_source("minimal"))
    ev = Evaluation(harness_id=h.id, task="jsonl:x", split="score", n=1, seed=0, J=0.0, completion_rate=0.0,
                    solver_calls=len(calls), tokens=1, wall_s=0.0, problems=[p])
    with tempfile.TemporaryDirectory() as d, Store.open(Path(d) / "run") as s:
        s.create_run("r", {"q": question})
        s.add_harness(h)
        back = s.load_evaluation(s.save_evaluation("r", ev))
        s.finish_run("r", {"answer": answer, "error": error})
    for obj in (ev.to_json(), back.to_json()):
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")
        old, sys.stdout = sys.stdout, out
        try:
            emit(obj, True)
            emit(obj, False, human=f"{answer} {error}")
        finally:
            sys.stdout = old


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=st.lists(FRAME | RAW, min_size=1, max_size=3), question=TEXT)
def test_any_frame_a_harness_sends_ends_in_a_status_that_is_saved_and_printed(
        frames: list[dict[str, Any] | bytes], question: str) -> None:
    status, answer, error, broker = asyncio.run(_serve(frames))
    for text in (answer, error):
        assert text is None or text.encode("utf-8")  # never a lone surrogate past the channel
    _save_load_print(status, answer, error, broker.calls, question)


def test_a_result_with_a_lone_surrogate_is_a_bad_result() -> None:
    status, answer, error, _ = asyncio.run(_serve([{"type": "result", "answer": "3\ud800"}]))
    assert status == Status.BAD_RESULT and answer is None
    assert error is not None and "lone surrogate" in error and "answer" in error


def test_a_solver_text_with_a_lone_surrogate_reaches_the_harness_escaped() -> None:
    worker = Worker(proc=None, reader=None, writer=_Sink(), nonce=NONCE, uid=None,  # type: ignore[arg-type]
                    max_frame=1 << 20)
    asyncio.run(worker.send({"type": "response", "id": 1, "ok": True, "value": ["hi\ud800"]}))
    assert json.loads(worker.writer.data[4:].decode("utf-8"))["value"] == ["hi\ud800"]  # type: ignore[attr-defined]


def test_a_frame_nested_too_deep_is_a_protocol_violation_not_a_hang() -> None:
    status, _, error, _ = asyncio.run(_serve([b"[" * 100_000]))
    assert status == Status.BAD_RESULT and error is not None and "not valid JSON" in error


@pytest.mark.parametrize("text", ["3\ud800", "a\x00b"])
def test_the_store_saves_any_text(tmp_path: Path, text: str) -> None:
    _save_load_print(Status.OK, text, text, [CallRecord("model", {"prompt": text}, [text], 1, 1, 0.0, text)], text)
