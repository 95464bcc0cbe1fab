"""Zoo: self-consistency vote. Several sampled reason-then-answer completions; the most common
extracted answer wins (ties: the earliest)."""

import re
from collections import Counter

SAMPLES = 5


def extract(text):
    marks = re.findall(r"answer\s*(?:is)?\s*[:：]\s*(.+)", text, re.IGNORECASE)
    if marks:
        answer = marks[-1]
    else:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        answer = lines[-1] if lines else ""
    return answer.strip().strip("*`$ ").rstrip(".")


def solve(model, question):
    messages = [{"role": "user", "content": (
        f"{question}\n\nThink step by step, briefly. Then write the final answer on its own last line as "
        "'Answer: <answer>', in exactly the format the question asks for.")}]
    replies = model.generate(messages, n=SAMPLES, max_tokens=320, temperature=0.7)
    answers = [a for a in (extract(r) for r in replies) if a]
    if not answers:
        return ""
    counts = Counter(answers)
    best = max(counts.values())
    return next(a for a in answers if counts[a] == best)
