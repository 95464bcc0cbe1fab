"""A rule-based chat solver for the zoo tests: answers every request kind the zoo harnesses make,
always with the answer "6" (so J is 1.0 exactly when a harness extracts and returns it)."""


def _text(prompt):
    return prompt if isinstance(prompt, str) else "\n".join(m.get("content", "") for m in prompt)


def six(prompt, n=1, **params):
    text = _text(prompt)
    if "Python program" in text:
        reply = "Here it is:\n```python\nprint(2 * 3)\n```"
    elif "VERDICT" in text:
        reply = "It checks out. VERDICT: correct"
    elif "Search:" in text:
        reply = "Answer: 6"
    elif isinstance(prompt, list) and prompt[0].get("role") == "system":
        reply = "6"  # few-shot
    else:
        reply = "First I think.\nAnswer: 6"
    return [reply] * n
