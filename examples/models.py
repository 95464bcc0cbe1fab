"""Scripted stand-ins for the two models, so that the examples run anywhere in seconds: a solver that
answers sums in a sentence, and a proposer that always proposes the same revision (take the last number
of the completion). Point --solver and --proposer at real models (openai:..., local:...) to do it for real."""

import re

EDIT = """I will return only the number.
<<<<<<< SEARCH
    return completion.strip()
=======
    import re
    numbers = re.findall(r"-?\\d+", completion)
    return numbers[-1] if numbers else completion.strip()
>>>>>>> REPLACE
"""


def solver(prompt, **kw):
    text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
    m = re.search(r"What is (\d+) \+ (\d+)\?", text)
    return f"Let me add them: the sum is {int(m.group(1)) + int(m.group(2))}." if m else "I do not know."


def proposer(prompt, **kw):
    return EDIT
