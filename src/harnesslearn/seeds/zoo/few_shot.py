"""Zoo: few-shot. Worked examples of this task (questions and gold answers from the task's
feedback split, filled in by `harnesslearn.zoo` when the harness is built for a task) shown to
the solver as earlier chat turns, so it answers in the same form."""

EXAMPLES = []  # (question, answer) pairs; filled in for the task at hand


def solve(model, question):
    messages = [{"role": "system", "content": "Answer each question with the final answer only, in the same form "
                                              "as the earlier answers."}]
    for q, a in EXAMPLES:
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    messages.append({"role": "user", "content": question})
    reply = model.generate(messages, max_tokens=128, temperature=0.0)[0]
    lines = [line.strip() for line in reply.strip().splitlines() if line.strip()]
    return lines[0] if len(lines) == 1 else reply.strip()
