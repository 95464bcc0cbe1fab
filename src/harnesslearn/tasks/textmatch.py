"""Answer matching shared by the QA and JSONL scorers: SQuAD-style normalisation, exact match,
token F1 (best over gold aliases), and number parsing.

``normalize_answer`` is the official SQuAD v1.1 / HotpotQA / MuSiQue one: lower-case, drop ASCII
punctuation, drop the articles a/an/the, collapse white space. It does not fold accents or
unicode punctuation (the official scripts do not either).
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Iterable
from fractions import Fraction

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
YES_NO = {"yes", "no", "noanswer"}


def normalize_answer(s: str) -> str:
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str, *, yes_no_rule: bool = False) -> float:
    """Token F1 of the normalised strings. With ``yes_no_rule`` (HotpotQA, 2Wiki official
    scripts) F1 is 0 when either side normalises to yes/no/noanswer and they differ."""
    p, g = normalize_answer(prediction), normalize_answer(gold)
    if yes_no_rule and (p in YES_NO or g in YES_NO) and p != g:
        return 0.0
    pt, gt = p.split(), g.split()
    common = Counter(pt) & Counter(gt)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pt), same / len(gt)
    return 2 * precision * recall / (precision + recall)


def best_em_f1(prediction: str, golds: Iterable[str], *, yes_no_rule: bool = False) -> tuple[float, float]:
    """(EM, F1), each the best over the gold answer and its aliases."""
    golds = list(golds)
    if not golds:
        return 0.0, 0.0
    em = max(exact_match(prediction, g) for g in golds)
    f1 = max(token_f1(prediction, g, yes_no_rule=yes_no_rule) for g in golds)
    return em, f1


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_GROUPED = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d*)?$")


def parse_number(text: str) -> float | None:
    """The number that the whole string spells, or None. Accepts surrounding white space, a
    trailing period, a leading ``$`` or trailing ``%`` (dropped, not divided by 100), thousands
    separators in groups of three ("1,000"), scientific notation and fractions ("3/4", "-1/2").
    It does not search for a number inside prose: "the answer is 4" is None."""
    s = text.strip().rstrip(".").strip()
    if s.startswith("$"):
        s = s[1:]
    if s.endswith("%"):
        s = s[:-1]
    s = s.strip()
    if _GROUPED.match(s):
        s = s.replace(",", "")
    if _NUMBER.match(s):
        v = float(s)
        return v if math.isfinite(v) else None
    if s.count("/") == 1:
        num, den = (part.strip() for part in s.split("/"))
        if re.fullmatch(r"[+-]?\d+", num) and re.fullmatch(r"\d+", den) and int(den) != 0:
            return float(Fraction(int(num), int(den)))
    return None


def numbers_match(a: float, b: float, rel_tol: float = 1e-6, abs_tol: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)
