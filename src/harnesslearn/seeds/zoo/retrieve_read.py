"""Zoo (QA): retrieve, then read. More passages than the seed, an instruction to answer with a
short span taken from them, and careful extraction of that span."""


def solve(model, question):
    docs = model.search(question, k=8)
    context = "\n\n".join(f"[{i + 1}] {d['title']}: {d['text']}" for i, d in enumerate(docs))
    messages = [{"role": "user", "content": (
        f"Passages:\n{context}\n\nQuestion: {question}\n\nUsing the passages, answer with a short phrase "
        "(a name, date, number or place), not a sentence. Reply as 'Answer: <short answer>'.")}]
    reply = model.generate(messages, max_tokens=64, temperature=0.0)[0]
    lines = [line.strip() for line in reply.split("Answer:")[-1].strip().splitlines() if line.strip()]
    return lines[0].rstrip(".") if lines else ""
