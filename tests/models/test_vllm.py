"""The vllm: provider when its server never comes up (no GPU needed: the server command is replaced by one
that dies): every call of the evaluation is an infrastructure fault with the server's reason, the server is
started once, and no assert is reachable from a model call."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from harnesslearn.errors import InfraError, MissingExtraError
from harnesslearn.models import GenerateRequest


def test_a_server_that_dies_makes_every_call_an_infra_fault_with_its_reason(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import importlib.util

    from harnesslearn.models import vllm

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "vllm" else real(n, *a))
    started = tmp_path / "started"
    dies = [sys.executable, "-c", f"open({str(started)!r}, 'a').write('x'); import time; time.sleep(1); "
            "print('torch.OutOfMemoryError: CUDA out of memory'); raise SystemExit(3)"]
    monkeypatch.setattr(vllm, "vllm_argv", lambda *a, **kw: dies)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    backend = vllm.VLLMBackend(str(tmp_path / "m"), ready_timeout=60, log=str(tmp_path / "vllm.log"))

    async def main() -> list[BaseException | object]:
        try:
            return await asyncio.gather(*(backend.generate(GenerateRequest(f"q{i}")) for i in range(8)),
                                        return_exceptions=True)
        finally:
            await backend.aclose()

    out = asyncio.run(main())
    assert all(isinstance(e, InfraError) for e in out), out  # never an AssertionError, never an answer
    assert all("exited with code 3" in str(e) and "CUDA out of memory" in str(e) for e in out), out
    assert started.read_text() == "x"  # one start for all eight calls


def test_without_vllm_the_error_says_it_is_for_gpu_machines(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import importlib.util

    from harnesslearn.models import vllm

    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None)
    with pytest.raises(MissingExtraError, match="NVIDIA GPU"):
        vllm.VLLMBackend("/nowhere")
