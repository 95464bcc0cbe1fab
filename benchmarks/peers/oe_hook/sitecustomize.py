"""Counting hook for OpenEvolve's diff application, loaded as ``sitecustomize`` by every process
of an OpenEvolve run that ``openevolve_runner.py`` starts (its worker processes are spawned, so
a patch made in the parent alone would not reach them). It changes nothing OpenEvolve does: it
wraps ``extract_diffs`` and ``apply_diff_blocks`` in ``openevolve.utils.code_utils`` (which the
iteration worker imports at call time) and appends one JSON line per call to ``$OE_DIFF_LOG``:
how many SEARCH/REPLACE blocks a response held, how many of their SEARCH texts matched the
parent (OpenEvolve skips the others without a word unless none matched) and whether the
program changed. Active only when ``OE_DIFF_LOG`` is set."""

import json
import os

_LOG = os.environ.get("OE_DIFF_LOG")


def _write(ev):
    with open(_LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(ev) + "\n")


if _LOG:
    try:
        import openevolve.utils.code_utils as _cu
    except Exception:  # not the OpenEvolve environment: do nothing
        _cu = None
    if _cu is not None:
        _extract, _apply = _cu.extract_diffs, _cu.apply_diff_blocks

        def extract_diffs(diff_text, diff_pattern=_cu._STANDARD_DIFF_PATTERN):
            try:
                blocks = _extract(diff_text, diff_pattern)
            except ValueError as e:
                _write({"event": "extract", "error": str(e)[:200], "pid": os.getpid()})
                raise
            _write({"event": "extract", "blocks": len(blocks), "pid": os.getpid()})
            return blocks

        def apply_diff_blocks(original_text, diff_blocks):
            new, applied = _apply(original_text, diff_blocks)
            _write({"event": "apply", "blocks": len(diff_blocks), "applied": applied,
                    "changed": new != original_text, "pid": os.getpid()})
            return new, applied

        _cu.extract_diffs, _cu.apply_diff_blocks = extract_diffs, apply_diff_blocks
