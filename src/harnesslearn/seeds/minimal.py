"""Seed harness: one solver call, then extract the answer."""


def solve(model, question):
    prompt = f"Question: {question}\nAnswer:"
    completion = model(prompt, max_tokens=64, temperature=0.0, stop=["\n"])
    return completion.strip()
