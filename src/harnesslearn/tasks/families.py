"""Named sets of Reasoning Gym families, and the probe that writes ``PARTIAL_CREDIT.md``.

``paper-train`` and ``paper-excluded`` are the paper's. ``paper-eval`` is our choice of 21
families that are in neither, picked so that:
- every one has a single gold answer string that its own scorer gives 1.0 (families whose
  ``answer`` is None, such as boxnet or rubiks_cube, are left out: the feedback split could not
  show a gold answer), and generates in about a millisecond an item offline;
- they mix skills: arithmetic (basic_arithmetic, gcd, prime_factorization,
  fraction_simplification), algebra (simple_equations), string and cipher work (caesar_cipher,
  letter_counting, spell_backward, word_sorting), algorithms on numbers and grids
  (base_conversion, spiral_matrix, largest_island, shortest_path, mini_sudoku), logic
  (knights_knaves, syllogism), relational reasoning (family_relationships), induction
  (number_sequence, list_functions), code execution (bf) and probability (coin_flip);
- they mix scorers: about half use the base containment rule (partial credit for answers that
  contain the gold), the others their own scorers, some binary, some with their own partial
  credit (see PARTIAL_CREDIT.md);
- none is one of the algorithm-heavy ``paper-excluded`` families.

Run ``python -m harnesslearn.tasks.families --write-doc`` to regenerate ``PARTIAL_CREDIT.md``.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harnesslearn.errors import UserError

FAMILY_SETS: dict[str, tuple[str, ...]] = {
    "paper-train": ("codeio", "maze", "rotten_oranges", "simple_geometry", "tower_of_hanoi"),
    "paper-excluded": ("knight_swap", "letter_jumble", "modulo_grid", "sokoban", "ab"),
    "paper-eval": (
        "basic_arithmetic", "gcd", "prime_factorization", "fraction_simplification", "simple_equations",
        "base_conversion", "caesar_cipher", "letter_counting", "spell_backward", "word_sorting",
        "spiral_matrix", "knights_knaves", "syllogism", "family_relationships", "shortest_path",
        "largest_island", "mini_sudoku", "number_sequence", "list_functions", "bf", "coin_flip",
    ),
}
SLOW_FAMILIES = ("sokoban", "knight_swap")  # seconds to minutes per few items; cached on disk
DOC_PATH = Path(__file__).with_name("PARTIAL_CREDIT.md")


def family_set(name: str) -> list[str]:
    """The families of a named set (``paper-train``, ``paper-excluded``, ``paper-eval``)."""
    if name not in FAMILY_SETS:
        close = difflib.get_close_matches(name, list(FAMILY_SETS), n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; choose one of {', '.join(FAMILY_SETS)}"
        raise UserError(f"unknown family set {name!r}{hint}")
    return list(FAMILY_SETS[name])


# ---------------------------------------------------------------------- partial-credit probe
PROBES = {
    "padded": lambda g: g + "0",  # "6" -> "60": the STYLE.md gaming example
    "in_prose": lambda g: f"The answer is {g}",
    "truncated": lambda g: g[:-1],
    "wrong": lambda g: "zzzz",
}


@dataclass
class FamilyProbe:
    family: str
    category: str
    scorer_from: str  # class that defines score_answer
    own_scorer: bool
    gold_given: bool
    gold_score: float
    probes: dict[str, float] = field(default_factory=dict)  # mean score of each probe answer
    scorer_errors: int = 0
    ms_per_item: float = 0.0

    @property
    def partial_credit(self) -> bool:
        return any(0.0 < v < 1.0 for v in self.probes.values())

    @property
    def source(self) -> str:
        if not self.gold_given:
            return "own scorer checks the answer's validity (no single gold)"
        if not self.own_scorer:
            return "base rule: len(gold)/len(answer) when gold is inside the answer"
        return "own scorer" + (" with partial credit" if self.partial_credit else ", no partial credit seen")


def probe_family(family: str, n: int = 5, seed: int = 424242) -> FamilyProbe:
    """Score the gold answer and a few non-gold answers built from it, on ``n`` items."""
    from reasoning_gym.dataset import ProceduralDataset

    from harnesslearn.tasks.reasoning_gym import RGTask

    task = RGTask(family)
    ds = task._dataset(seed)
    owner = next(c for c in type(ds).__mro__ if "score_answer" in vars(c))
    t0 = time.perf_counter()
    problems = [task.problem(seed, i) for i in range(n)]
    ms = (time.perf_counter() - t0) * 1000 / n
    golds = [p.answer for p in problems]
    out = FamilyProbe(
        family=family, category=ds.category, scorer_from=owner.__name__,
        own_scorer=owner is not ProceduralDataset, gold_given=all(g is not None for g in golds),
        gold_score=0.0, ms_per_item=ms,
    )
    if not out.gold_given:
        return out
    out.gold_score = sum(task.score(str(g), p).value for g, p in zip(golds, problems, strict=True)) / n
    for name, make in PROBES.items():
        total = 0.0
        for g, p in zip(golds, problems, strict=True):
            s = task.score(make(str(g)), p)
            total += s.value
            out.scorer_errors += int(s.details.get("scorer_error", 0.0))
        out.probes[name] = total / n
    return out


def render_doc(probes: list[FamilyProbe], rg_version: str) -> str:
    lines = [
        "# Where partial credit comes from, per Reasoning Gym family",
        "",
        f"Generated by `python -m harnesslearn.tasks.families --write-doc` (reasoning-gym {rg_version}).",
        "Do not edit by hand.",
        "",
        "Reasoning Gym's base `score_answer` gives 1.0 for an exact string match and",
        "len(gold)/len(answer) when the gold string appears inside the answer: \"60\" scores 0.5",
        "against gold \"6\", so padding the gold with more text still earns credit. Families that override",
        "`score_answer` use their own rules (some parse the answer and are binary, some give",
        "partial credit for partly right answers, some give 0.01 to 0.05 for any well-formed answer).",
        "Use `rg:FAMILY?strict=1` to count only scores of 1.0.",
        "",
        "How the table is made: for 5 items of each family (seed 424242), the gold answer and four",
        "answers made from it are scored with the family's own scorer; each column is the mean.",
        "`padded` = gold + \"0\", `in_prose` = \"The answer is \" + gold, `truncated` = gold minus its",
        "last character, `wrong` = \"zzzz\". \"partial\" is yes when any of them scored strictly",
        "between 0 and 1. It is a probe, not a proof: a family can give partial credit on answers",
        "that these four do not try. `errors` counts probe answers that made the scorer raise",
        "(scored 0 here). `ms/item` is generation time on the machine that wrote this file.",
        "",
        "| family | category | score_answer from | partial | gold | padded | in_prose | truncated | wrong | errors | ms/item | source |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in probes:
        if p.gold_given:
            cells = [f"{p.gold_score:.2f}"] + [f"{p.probes[k]:.2f}" for k in PROBES]
            partial = "yes" if p.partial_credit else "no"
        else:
            cells = ["n/a"] * (1 + len(PROBES))
            partial = "n/a"
        lines.append(
            f"| {p.family} | {p.category} | {p.scorer_from} | {partial} | " + " | ".join(cells)
            + f" | {p.scorer_errors} | {p.ms_per_item:.1f} | {p.source} |"
        )
    n_partial = sum(p.partial_credit for p in probes)
    n_base = sum(not p.own_scorer for p in probes)
    n_wrong = sum(p.probes.get("wrong", 0.0) > 0 for p in probes)
    lines += [
        "",
        f"Summary: {len(probes)} families; {n_base} use the base containment rule; "
        f"{n_partial} gave partial credit to at least one probe; {n_wrong} gave credit to \"zzzz\".",
        "",
    ]
    return "\n".join(lines)


def write_doc(path: Path = DOC_PATH, n: int = 5) -> list[FamilyProbe]:
    from harnesslearn.tasks.reasoning_gym import rg_families, rg_version

    probes = []
    for fam in rg_families():
        print(f"probing {fam}", file=sys.stderr, flush=True)
        probes.append(probe_family(fam, n=2 if fam in SLOW_FAMILIES else n))
    path.write_text(render_doc(probes, rg_version()), encoding="utf-8")
    return probes


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--write-doc", nargs="?", const=str(DOC_PATH), metavar="PATH",
                    help="probe every family and write the partial-credit table")
    args = ap.parse_args(argv)
    if args.write_doc:
        write_doc(Path(args.write_doc))
        print(f"wrote {args.write_doc}", file=sys.stderr)
    else:
        for name, fams in FAMILY_SETS.items():
            print(f"{name}: {', '.join(fams)}")


if __name__ == "__main__":
    main()
