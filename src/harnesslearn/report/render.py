"""HTML building blocks for the report. Every piece of text goes through ``esc``.

Harness sources, proposer completions, questions and answers are untrusted: they are escaped
(``html.escape`` with quotes) wherever they appear, including attribute values. As a second
line of defence the page carries a Content-Security-Policy that allows only its own inline
script (by hash) and ``data:`` images, so markup that slipped through could neither run script
nor load anything from the network. What this does not cover: text that is *visually*
misleading (for example a harness source containing fake report headings) is shown as text.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import html
import re
from collections.abc import Iterable, Sequence
from importlib import resources
from typing import Any

MAX_CELL = 400  # characters of untrusted text shown in one table cell
MAX_DIFF_LINES = 400  # lines of one diff shown before truncation


def esc(value: Any) -> str:
    """HTML-escape ``value`` (``None`` shows as an empty string)."""
    return "" if value is None else html.escape(str(value), quote=True)


def clip(text: Any, limit: int = MAX_CELL) -> str:
    """``text`` as a string cut to ``limit`` characters (with a marker), not yet escaped."""
    s = "" if text is None else str(text)
    return s if len(s) <= limit else s[:limit] + f"… [{len(s) - limit} more chars]"


def fmt_num(value: Any, digits: int = 3) -> str:
    """A number for a table cell: floats rounded, ints as is, missing as an en dash."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return esc(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], empty: str = "no rows") -> str:
    """A table; ``headers`` are escaped, row cells must already be HTML (use ``td``/``esc``)."""
    body = "".join("<tr>" + "".join(row) + "</tr>\n" for row in rows)
    if not body:
        return f'<p class="empty">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table>"


def td(value: Any, kind: str = "text") -> str:
    """One cell: ``num`` (right-aligned number), ``cell`` (clipped monospace text) or plain text."""
    if kind == "num":
        return f'<td class="num">{fmt_num(value)}</td>'
    if kind == "cell":
        return f'<td class="cell">{esc(clip(value))}</td>'
    return f"<td>{esc(value)}</td>"


def status_cell(status: Any) -> str:
    cls = "st-ok" if status == "ok" else "st-bad"
    return f'<td class="{cls}">{esc(status)}</td>'


def img(name: str, png: bytes, alt: str) -> str:
    """An ``<img>`` with the PNG embedded as a base64 data URI."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img class="plot" data-name="{esc(name)}" alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def diff_html(old: str, new: str, old_name: str, new_name: str, context: int = 3) -> str:
    """A unified diff of two sources as a coloured, escaped ``<pre>``."""
    lines = list(
        difflib.unified_diff(old.splitlines(), new.splitlines(), old_name, new_name, n=context, lineterm="")
    )
    if not lines:
        return '<p class="empty">no textual difference</p>'
    extra = len(lines) - MAX_DIFF_LINES
    out = []
    for line in lines[:MAX_DIFF_LINES]:
        if line.startswith(("+++", "---")):
            cls = "d-head"
        elif line.startswith("@@"):
            cls = "d-hunk"
        elif line.startswith("+"):
            cls = "d-add"
        elif line.startswith("-"):
            cls = "d-del"
        else:
            cls = "d-ctx"
        out.append(f'<span class="{cls}">{esc(line) or " "}</span>')
    if extra > 0:
        out.append(f'<span class="d-hunk">… {extra} more diff lines not shown</span>')
    return '<pre class="diff">' + "".join(out) + "</pre>"


_SCRIPT = re.compile(r"<script>(.*?)</script>", re.S)


def page(title: str, body: str) -> str:
    """The full document: the packaged template with ``title`` (escaped here) and ``body``
    (already HTML) filled in, and the CSP hash of the template's one inline script."""
    template = (resources.files("harnesslearn") / "report" / "template.html").read_text(encoding="utf-8")
    m = _SCRIPT.search(template)
    script = m.group(1) if m else ""
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    # Body last: nothing inside the untrusted body is ever re-scanned for placeholders.
    head, _, tail = template.partition("{{body}}")
    head = head.replace("{{script_hash}}", f"sha256-{digest}").replace("{{title}}", esc(title))
    return head + body + tail
