"""Open the report in headless Chromium; fail on console errors, JS errors, CSP violations or
images that did not load.

How: ``chromium --headless --dump-dom`` prints the DOM after the load event. The report's own
inline script records on ``<body>`` how many images there are and which failed to decode
(``img.complete && img.naturalWidth > 0``), and on ``<html>`` any JS error or CSP violation.
Console messages come from ``--enable-logging=stderr`` (lines with ``CONSOLE``). A negative
control page with a broken image and a JS error checks that this detector does detect.

Skipped only when no chromium binary is installed (CI installs Debian's ``chromium``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from report_fixtures import full_run, partial_run

from harnesslearn.report import render_report
from harnesslearn.report.render import page

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or (
    "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None
)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--enable-logging=stderr", "--v=0", "--dump-dom",
]


@dataclass
class PageCheck:
    dom: str
    console: list[str]

    def attr(self, name: str) -> str | None:
        m = re.search(rf'\s{re.escape(name)}="([^"]*)"', self.dom)
        return m.group(1) if m else None

    def problems(self) -> list[str]:
        """Everything wrong with the page; empty when it loaded cleanly."""
        out = [f"console: {line}" for line in self.console]
        if self.attr("data-checked") != "1":
            out.append("the page's load check did not run (no data-checked)")
        if self.attr("data-broken"):
            out.append(f"broken images: {self.attr('data-broken')}")
        for a in ("data-js-error", "data-csp-violation"):
            if self.attr(a):
                out.append(f"{a}: {self.attr(a)}")
        return out


def open_in_chromium(path: Path) -> PageCheck:
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(prefix="hl-chromium-") as profile:
        p = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", path.resolve().as_uri()],
            capture_output=True, text=True, timeout=120,
        )
    assert p.returncode == 0, p.stderr[-2000:]
    console = [ln for ln in p.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    return PageCheck(p.stdout, console)


def test_full_report_opens_cleanly(tmp_path: Path) -> None:
    full_run(tmp_path)
    r = render_report(tmp_path)
    check = open_in_chromium(r.path)
    assert check.problems() == []
    assert check.attr("data-images") == str(len(r.plots)) and len(r.plots) == 3
    assert "Lineage" in check.dom


def test_partial_report_opens_cleanly(tmp_path: Path) -> None:
    partial_run(tmp_path)
    r = render_report(tmp_path)
    check = open_in_chromium(r.path)
    assert check.problems() == []
    assert check.attr("data-images") == str(len(r.plots))


def test_detector_catches_broken_image_and_script_error(tmp_path: Path) -> None:
    """Negative control: the same template with a broken image and a console error."""
    bad = tmp_path / "bad.html"
    # a corrupt PNG data URI (allowed by the CSP, fails to decode) and an inline script that the
    # CSP blocks (a violation, reported on the console)
    body = ('<img data-name="corrupt" src="data:image/png;base64,iVBORw0KGgoAAAAA">'
            "<script>console.error('boom')</script>")
    bad.write_text(page("bad", body), encoding="utf-8")
    check = open_in_chromium(bad)
    problems = check.problems()
    assert any(p.startswith("broken images: corrupt") for p in problems), problems
    assert any(p.startswith("console:") for p in problems), problems
    assert check.attr("data-csp-violation"), problems


MODELS = '''
def solver(prompt, **params):
    return "I think it is " + str(len(prompt) % 7) + " <b>bold</b> <script>x()</script>"

N = [0]

def proposer(prompt, **params):
    N[0] += 1
    if N[0] % 2:
        return "no blocks here <script>alert(1)</script>"
    return "<<<<<<< SEARCH\\n    return completion.strip()\\n=======\\n    return completion.strip().split()[3]\\n>>>>>>> REPLACE\\n"
'''


@pytest.mark.slow  # about 20 s: two adaptation runs through the real executor
def test_report_of_a_real_compare_run_opens_cleanly(tmp_path: Path) -> None:
    """End to end: `adapt --strategy compare` with scripted models, then `report`, then Chromium."""
    models = tmp_path / "models.py"
    models.write_text(MODELS, encoding="utf-8")
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "harnesslearn.cli", "adapt", "--task", "rg:basic_arithmetic",
           "--solver", f"python:{models}:solver", "--proposer", f"python:{models}:proposer",
           "--strategy", "compare", "--rounds", "2", "--candidates", "2", "--n-feedback", "2",
           "--n-score", "3", "--n-test", "4", "--run-dir", str(run_dir), "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    p = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "report", str(run_dir), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout)
    assert len(out["plots"]) == 4  # J and validity for each of the two strategies
    check = open_in_chromium(Path(out["report"]))
    assert check.problems() == []
    assert check.attr("data-images") == "4"
    assert "upper bound" in check.dom, "oracle not labelled"
    assert "st-bad\">invalid</td>" in check.dom, "invalid proposals not shown"
