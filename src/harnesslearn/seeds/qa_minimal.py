"""Seed harness for multi-hop QA: retrieve once, then answer from the retrieved passages."""


def solve(model, question):
    docs = model.search(question, k=5)
    context = "\n\n".join(f"{d['title']}: {d['text']}" for d in docs)
    prompt = f"{context}\n\nQuestion: {question}\nAnswer:"
    completion = model(prompt, max_tokens=32, temperature=0.0, stop=["\n"])
    return completion.strip()
