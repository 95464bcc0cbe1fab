"""The example's metric, with partial credit: 1.0 when the answer is the number and nothing else, 0.5 when
the right number is somewhere in a longer answer, 0 otherwise. harnesslearn calls it in its trusted process
as score(answer, problem) -> float in [0, 1]; problem.answer is the gold answer from the JSONL file."""

import re


def grade(answer: str, problem) -> float:
    gold = str(problem.answer).strip()
    if answer.strip() == gold:
        return 1.0
    return 0.5 if gold in re.findall(r"-?\d+", answer) else 0.0
