"""The one parser of ``PREFIX:NAME?key=value&key2=value2`` specs (task specs and model specs).

Rules, the same for both:
- the prefix is everything before the first ``:`` (stripped, lower-cased) and must not be empty;
- the name is everything after it up to the first ``?`` (a name may itself hold ``:``, as in
  ``python:FILE.py:FUNCTION``);
- the query is ``key=value`` pairs joined by ``&``, URL-decoded; a pair without ``=``, an empty
  key or a key given twice is a ``UserError`` (one line).

Values stay strings here: a task kind turns them into ints, floats, bools or JSON
(``tasks.parse_value``), a model provider into the types of its options
(``models.common.coerce_option``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from harnesslearn.errors import UserError


@dataclass(frozen=True)
class Spec:
    prefix: str
    name: str
    options: dict[str, str] = field(default_factory=dict)


def parse_spec(spec: str, what: str = "spec", example: str = "PREFIX:NAME") -> Spec:
    """``PREFIX:NAME?k=v&k2=v2`` -> ``Spec``. ``what`` names the spec in messages ("task spec",
    "model spec") and ``example`` shows its shape. Raises UserError."""
    if not isinstance(spec, str) or not spec.strip():
        raise UserError(f"empty {what}")
    prefix, sep, rest = spec.strip().partition(":")
    if not sep or not prefix.strip():
        raise UserError(f"{what} {spec!r} needs a prefix: expected {example}")
    name, _, query = rest.partition("?")
    options: dict[str, str] = {}
    if query:
        try:
            pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
        except ValueError:
            raise UserError(f"{what} {spec!r}: options must look like ?key=value&key2=value") from None
        for k, v in pairs:
            if not k:
                raise UserError(f"{what} {spec!r}: an option has no name")
            if k in options:
                raise UserError(f"{what} {spec!r}: option {k!r} given twice")
            if not v.strip():  # ?scorer= would silently mean exact match, ?adapter= the untrained proposer
                raise UserError(f"{what} {spec!r}: option {k!r} has no value (leave it out for its default)")
            options[k] = v
    return Spec(prefix.strip().lower(), name, options)
