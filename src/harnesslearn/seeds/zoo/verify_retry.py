"""Zoo: verify and retry. The solver answers with reasoning, then checks its own answer; if the
check says it is wrong, it tries again with the objection in view (up to 2 retries)."""

import re

RETRIES = 2


def extract(text):
    marks = re.findall(r"answer\s*(?:is)?\s*[:：]\s*(.+)", text, re.IGNORECASE)
    if marks:
        answer = marks[-1]
    else:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        answer = lines[-1] if lines else ""
    return answer.strip().strip("*`$ ").rstrip(".")


def solve(model, question):
    ask = (f"{question}\n\nThink step by step, briefly. Then write the final answer on its own last line as "
           "'Answer: <answer>', in exactly the format the question asks for.")
    messages = [{"role": "user", "content": ask}]
    answer = ""
    for _ in range(RETRIES + 1):
        reply = model.generate(messages, max_tokens=320, temperature=0.0)[0]
        answer = extract(reply)
        check = model.generate([{"role": "user", "content": (
            f"Question:\n{question}\n\nProposed answer: {answer}\n\nCheck the proposed answer carefully. "
            "If it is correct and in the requested format, reply 'VERDICT: correct'. Otherwise explain the "
            "mistake in one sentence and reply 'VERDICT: wrong'.")}], max_tokens=160, temperature=0.0)[0]
        if "verdict: wrong" not in check.lower():
            return answer
        messages += [{"role": "assistant", "content": reply},
                     {"role": "user", "content": f"A reviewer says this is wrong: {check.strip()[:400]}\n"
                                                 "Solve it again and end with 'Answer: <answer>'."}]
    return answer
