"""One round (propose/rounds.py): the one seed rule, sampling through real python: backends."""

from __future__ import annotations

import asyncio
from typing import Any

from harnesslearn.harness import Harness, seed_source
from harnesslearn.models import load_model
from harnesslearn.models.base import Completion, GenerateRequest, ModelBackend
from harnesslearn.propose.decode import PRIME
from harnesslearn.propose.rounds import candidate_seed


class _Recorder(ModelBackend):
    spec = "rec:x"

    def __init__(self) -> None:
        self.requests: list[GenerateRequest] = []

    async def generate(self, request: GenerateRequest) -> Completion:
        self.requests.append(request)
        return Completion([f"seed {request.seed}"])


def _propose(m: ModelBackend, prompt: str, k: int, seed: int = 0) -> list[str]:
    from harnesslearn.propose.formats import PlainSearch
    from harnesslearn.propose.rounds import revise

    cands = asyncio.run(revise(Harness(seed_source("minimal")), prompt, PlainSearch(), m, k, seed=seed, round=1,
                               concurrent=False))
    return [c.proposal for c in cands]


def test_propose_seeds_each_candidate() -> None:
    m = _Recorder()
    out = _propose(m, "P\n" + PRIME, 3, seed=10)
    assert [r.seed for r in m.requests] == [candidate_seed(10, 1, i) for i in range(3)]  # the one seed rule
    assert out[0] == PRIME + f"seed {candidate_seed(10, 1, 0)}"
    assert candidate_seed(0, 1, 0) != candidate_seed(0, 1, 1) != candidate_seed(0, 2, 0)


def test_propose_through_a_python_model(tmp_path: Any) -> None:
    f = tmp_path / "prop.py"
    f.write_text("def fn(prompt, **kw):\n    return 'x\\n=======\\ny\\n>>>>>>> REPLACE\\n'\n")
    m = load_model(f"python:{f}:fn")
    out = _propose(m, "P\n" + PRIME, 2)
    assert out == [PRIME + "x\n=======\ny\n>>>>>>> REPLACE\n"] * 2
