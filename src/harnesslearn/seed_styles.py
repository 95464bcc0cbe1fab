"""Seed harnesses written in different styles, for the format-varied variant.

Each does what the shipped ``minimal`` seed does (one solver call, then take the first line), so
a proposer trained on them sees the same starting point written several ways. Referenced in
configs as ``style:NAME``.
"""

from __future__ import annotations

STYLES: dict[str, str] = {
    "chat": '''"""Seed harness: ask the solver once with a chat message, keep the first line."""


def solve(model, question):
    messages = [
        {"role": "system", "content": "Answer the question. Reply with the answer only."},
        {"role": "user", "content": question},
    ]
    reply = model.generate(messages, n=1, temperature=0.0, max_tokens=64)[0]
    return reply.strip().split("\\n")[0]
''',
    "helpers": '''"""Seed harness: prompt building and answer extraction as helper functions."""

PROMPT = "Problem:\\n{question}\\n\\nFinal answer:"


def build_prompt(question):
    return PROMPT.format(question=question)


def extract_answer(text):
    return text.strip()


def solve(model, question):
    text = model(build_prompt(question), max_tokens=64, temperature=0.0, stop=["\\n"])
    return extract_answer(text)
''',
    "terse": '''def solve(model, question):
    return model("Q: " + question + "\\nA:", max_tokens=64, stop=["\\n"]).strip()
''',
}


def style_source(name: str) -> str:
    from harnesslearn.errors import UserError

    if name not in STYLES:
        raise UserError(f"unknown seed style {name!r}; styles: {', '.join(sorted(STYLES))}")
    return STYLES[name]
