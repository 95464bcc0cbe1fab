"""The transfer experiment (the paper's main table): train the proposer on a few task families (SFT on
teacher-free data, then GRPO with the exact reward) and measure single revisions of the minimal seed on
families it never saw, against the untrained proposer and the best zoo harness. Built for one GPU
lent in stretches: every stage stops at its deadline with what finished, and the state travels as
files (``collect``/``restore``). ``experiments/qwen12.py`` is the recipe; ``smoke`` runs it on the CPU.
"""

from harnesslearn.transfer.pipeline import collect, land, restore, run
from harnesslearn.transfer.settings import STAGES, TransferSettings

__all__ = ["STAGES", "TransferSettings", "collect", "land", "restore", "run"]
