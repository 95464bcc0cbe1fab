"""The one rule that keeps a revision as an SFT row, for every generator of SFT data (the teacher's revisions,
``sft_data.py``; the zoo files and the proposer's own samples, ``zoo_sft.py``):

1. static, before any run (:meth:`KeepRule.static`): the quality screen (``screen.screen``: compiles, size, no
   file/process/network access, no literal answer table), then, when asked, not a copy of any known source
   (``sources.match(...).copy``: the zoo files, the runtime API's programs, the prompts' programs) and not a
   harness that runs solver-written code with ``model.python`` (``taxonomy.runs_solver_code``: the held-out-loop
   control);
2. on the score split (:meth:`KeepRule.verdict`): its J beats its parent's J on the same problems by more than
   ``margin`` (``margin`` 0 is ``evaluation.improves``, strictly better); a J that could not be computed (an
   infrastructure failure) is neither kept nor counted as a loss.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from harnesslearn.training.screen import screen

VERDICTS = ("kept", "not_improved", "infra_error")


@dataclass(frozen=True)
class KeepRule:
    margin: float = 0.0  # J(revision) - J(parent) must be greater than this
    max_source_chars: int = 12000
    max_source_lines: int = 300
    drop_copies: bool = False  # a copy of a known source is dropped ("copy")
    prompt_dir: str | None = None  # the run's --prompt-dir: its templates' programs are known sources too
    hold_out_loop: bool = False  # a harness that runs solver-written code with model.python is dropped ("loop")

    @functools.cached_property
    def known(self) -> tuple[Any, ...]:
        """The known sources (``sources.known_sources`` of ``prompt_dir``), read once per rule."""
        from harnesslearn import sources

        return sources.known_sources(self.prompt_dir)

    def static(self, source: str, questions: Iterable[str] = ()) -> list[str]:
        """Why ``source`` is dropped before it is run (``screen:REASON``, ``loop``, ``copy``); [] when it is not."""
        from harnesslearn import sources
        from harnesslearn.taxonomy import runs_solver_code

        rejected = screen(source, questions=questions, max_chars=self.max_source_chars,
                          max_lines=self.max_source_lines)
        if rejected:
            return [f"screen:{r}" for r in rejected]
        out = []
        if self.hold_out_loop and runs_solver_code(source):
            out.append("loop")
        if self.drop_copies and sources.match(source, sources=self.known).copy:
            out.append("copy")
        return out

    def verdict(self, J: float | None, parent_J: float | None) -> str:
        """``kept`` when ``J`` beats ``parent_J`` by more than the margin, ``not_improved`` when it does not,
        ``infra_error`` when either could not be computed."""
        if J is None or parent_J is None:
            return "infra_error"
        return "kept" if J > parent_J + self.margin else "not_improved"
