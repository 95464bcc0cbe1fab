"""The HTML report: sections, escaping of untrusted text, partial runs, the CLI command."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from report_fixtures import EVIL, SEED, full_run, partial_run

from harnesslearn.errors import UserError
from harnesslearn.harness import Harness
from harnesslearn.propose.edits import EditResult
from harnesslearn.report import render_report, write_report
from harnesslearn.report.data import RunView
from harnesslearn.store import Store

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], str]:
    d = tmp_path_factory.mktemp("full")
    ids = full_run(d)
    path = write_report(d)
    return d, ids, path.read_text(encoding="utf-8")


def test_report_has_every_section(full: tuple[Path, dict[str, str], str]) -> None:
    _, _, html = full
    for heading in ("J per round", "Validity rates per round", "Lineage", "Diffs between consecutive best harnesses",
                    "Per-problem results (test split)", "Failure taxonomy", "Proposals", "Budgets used",
                    "Training rewards"):
        assert f">{heading}</h" in html, heading


def test_plots_are_embedded_and_written(full: tuple[Path, dict[str, str], str]) -> None:
    d, _, html = full
    files = sorted((d / "plots").glob("*.png"))
    assert len(files) == 3  # J per round, validity, training rewards
    embedded = re.findall(r'data-name="([^"]+)"[^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert sorted(n for n, _ in embedded) == [f.name for f in files]
    for name, data in embedded:
        assert base64.b64decode(data) == (d / "plots" / name).read_bytes()
        assert base64.b64decode(data).startswith(PNG_MAGIC)


def test_untrusted_text_is_escaped(full: tuple[Path, dict[str, str], str]) -> None:
    _, _, html = full
    assert EVIL not in html
    assert "<img src=x" not in html
    assert html.count("<script") == 1  # only the template's own check script
    assert html.count("&lt;script&gt;window.__pwned=1&lt;/script&gt;") >= 5  # shown, as text
    # nothing can be fetched: the only src attributes are data: URIs
    assert all(s.startswith("data:image/png;base64,") for s in re.findall(r'\ssrc="([^"]*)"', html))
    assert "default-src 'none'" in html


def test_csp_hash_matches_the_inline_script(full: tuple[Path, dict[str, str], str]) -> None:
    import hashlib

    _, _, html = full
    script = re.search(r"<script>(.*?)</script>", html, re.S)
    assert script is not None
    digest = base64.b64encode(hashlib.sha256(script.group(1).encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in html


def test_lineage_nests_children_under_parents(full: tuple[Path, dict[str, str], str]) -> None:
    _, ids, html = full
    tree = html[html.index('<ul class="tree">'):]
    tree = tree[: tree.index("<h3>")]
    pos = [tree.index(ids[k][:12]) for k in ("seed", "h1", "h2")]
    assert pos == sorted(pos)
    # h2 sits inside two nested lists below the seed's item
    between = tree[pos[0]:pos[2]]
    assert between.count("<ul>") == 2
    assert "★ best" in tree[pos[2]:pos[2] + 400]


def test_diffs_between_consecutive_bests(full: tuple[Path, dict[str, str], str]) -> None:
    _, ids, html = full
    sec = html[html.index(">Diffs between consecutive best harnesses<"):html.index(">Per-problem results")]
    assert sec.count('<pre class="diff">') == 2
    assert f"{ids['seed'][:12]} → {ids['h1'][:12]}" in sec
    assert '<span class="d-del">-    completion = model(prompt, max_tokens=64' in sec
    assert '<span class="d-add">+    completion = model(prompt, max_tokens=128' in sec


def test_oracle_is_labelled_upper_bound(full: tuple[Path, dict[str, str], str]) -> None:
    _, _, html = full
    assert "oracle best-of-N (selected on test: upper bound)" in html


def test_per_problem_table_and_taxonomy(full: tuple[Path, dict[str, str], str]) -> None:
    _, _, html = full
    sec = html[html.index(">Per-problem results"):html.index(">Failure taxonomy<")]
    assert sec.count("<tr>") == 5  # header + 4 test problems
    assert "harness_error: Traceback: ValueError &lt;oops&gt;" in sec
    tax = html[html.index(">Failure taxonomy<"):html.index(">Proposals<")]
    assert "seed harness, test split" in tax and "best harness, test split" in tax
    # seed on test: problems 0 and 2 (chain_sum) wrong answers -> extraction, 3 (basic_arithmetic) harness error
    seed_tab = tax[tax.index("seed harness, test split"):tax.index("best harness, test split")]
    row = re.search(r"<tr><td>chain_sum</td>(.*?)</tr>", seed_tab)
    assert row is not None
    assert re.findall(r">(\d+)<", row.group(1)) == ["0", "0", "2", "0", "0", "2", "2"]


def test_invalid_proposal_shows_its_reason(full: tuple[Path, dict[str, str], str]) -> None:
    _, _, html = full
    sec = html[html.index(">Proposals<"):html.index(">Budgets used<")]
    assert '<td class="st-bad">invalid</td><td class="cell">no_blocks</td>' in sec
    assert sec.count(">valid</td>") == 2


def test_partial_run_renders_what_it_has(tmp_path: Path) -> None:
    partial_run(tmp_path)
    r = render_report(tmp_path)
    html = r.path.read_text(encoding="utf-8")
    assert "Run status <b>running</b>" in html
    assert "no test-split evaluation of the seed or the best harness recorded" in html
    assert "the seed is still the best harness" in html
    assert len(r.plots) == 2  # J (seed at round 0) and validity (one proposal)
    assert "Training rewards" not in html


def test_empty_run_dir_renders(tmp_path: Path) -> None:
    Store.open(tmp_path).close()
    html = write_report(tmp_path).read_text(encoding="utf-8")
    assert "no runs recorded yet" in html


def test_selection_recomputed_without_rounds_rows(tmp_path: Path) -> None:
    """An interrupted round has no ``rounds`` row: the better candidate is still shown as best."""
    partial_run(tmp_path)
    from report_fixtures import H1, _eval, _save

    h1 = Harness(H1, parent_id=Harness(SEED).id)
    with Store.open(tmp_path) as st:
        st.add_harness(h1, run_id="sequential", round=1)
        _save(st, "sequential", _eval(h1, "score", [1, 1]), 1, "score")
        view = RunView.load(st, st.runs()[0])
        assert view.selected == [(0, Harness(SEED).id), (1, h1.id)]
        assert view.best_id == h1.id and view.seed_id == Harness(SEED).id


def test_answer_table_harness_is_flagged(tmp_path: Path) -> None:
    partial_run(tmp_path)
    table = "TABLE = {" + ", ".join(f"'question {i}': '{i}'" for i in range(10)) + "}\n"
    h = Harness(table + SEED, parent_id=Harness(SEED).id)
    with Store.open(tmp_path) as st:
        st.add_harness(h, run_id="sequential", round=1)
        st.save_proposal("sequential", 1, 1, parent_id=Harness(SEED).id, prompt="p", raw="x", edit=EditResult(valid=True, reason=None, detail=None, parsed=True, produced=True, n_blocks=1, source=None, harness_id=h.id))
    html = write_report(tmp_path).read_text(encoding="utf-8")
    assert "answer table? dict_literal line 1" in html


@pytest.mark.parametrize("kind", ["missing", "not_a_run", "garbage_db", "a_file"])
def test_cli_rejects_non_run_dirs(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "x"
    if kind == "not_a_run":
        target.mkdir()
    elif kind == "garbage_db":
        target.mkdir()
        (target / "runs.sqlite").write_bytes(b"this is not sqlite" * 100)
    elif kind == "a_file":
        target.write_text("hi")
    with pytest.raises(UserError):
        write_report(target)
    p = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "report", str(target)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stdout == ""
    assert len(p.stderr.strip().splitlines()) == 1 and "error" in p.stderr


def test_cli_json(full: tuple[Path, dict[str, str], str]) -> None:
    d, _, _ = full
    p = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "report", str(d), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["report"] == str(d / "report.html")
    assert sorted(Path(x).name for x in out["plots"]) == sorted(f.name for f in (d / "plots").glob("*.png"))
    # the failure taxonomy the report shows, as data: the seed's test runs on chain_sum (two extraction failures)
    # and basic_arithmetic (a harness error), as in the page
    (run,) = out["taxonomy"].values()
    assert run["seed_test"]["chain_sum"] == {"extraction": 2}
    assert run["seed_test"]["basic_arithmetic"] == {"harness_error": 1}
    assert set(run) == {"seed_test", "best_test", "all"}


def test_series_per_round(full: tuple[Path, dict[str, str], str]) -> None:
    d, ids, _ = full
    with Store.open(d, create=False) as st:
        view = RunView.load(st, st.runs()[0])
        best_score, best_test, cands = view.j_series()
        assert best_score == [(0, 0.25), (1, 0.5), (2, 0.75)]
        assert best_test == [(0, 0.25), (1, 1.0), (2, 0.75)]  # h1's test J comes from the oracle evaluation
        assert sorted(cands) == [(1, 0.5), (2, 0.75)]
        assert view.oracle_test_j() == 1.0
        v = view.validity_series()
        assert v["parsed"] == [(1, 0.5), (2, 1.0)] and v["valid"] == [(1, 0.5), (2, 1.0)]
        assert v["completion"] == [(1, 0.75), (2, 1.0)]
        assert [r.id for r in view.best_path()] == [ids["seed"], ids["h1"], ids["h2"]]


@pytest.mark.parametrize("kind", ["link_to_dev_zero", "fifo", "link_out", "row_path_absolute", "row_path_dotdot",
                                  "too_large", "harnesses_dir_link"])
def test_report_reads_only_regular_harness_files_inside_the_run_dir(tmp_path: Path, kind: str) -> None:
    """A damaged or hostile run directory (a harness file that is a link to /dev/zero or out of the run
    directory, a FIFO, a row that names an absolute or ``..`` path, a huge file) is reported as a missing
    source, quickly: never a read without end, a hang, or a file read from outside the run directory (the
    outside copy holds the right text, so only where it lies can make it wrong); the store's own check
    calls it damaged in one line."""
    import os
    import sqlite3

    d = tmp_path / "run"
    ids = full_run(d)
    target = d / "harnesses" / f"{ids['h2']}.py"
    outside = tmp_path / "secret.py"
    outside.write_text(target.read_text())  # the same text, so only the location can make it wrong
    if kind == "link_to_dev_zero":
        target.unlink()
        target.symlink_to("/dev/zero")
    elif kind == "fifo":
        target.unlink()
        os.mkfifo(target)
    elif kind == "link_out":
        target.unlink()
        target.symlink_to(outside)
    elif kind in ("row_path_absolute", "row_path_dotdot"):
        path = str(outside) if kind == "row_path_absolute" else "harnesses/../../secret.py"
        c = sqlite3.connect(d / "runs.sqlite")
        c.execute("UPDATE harnesses SET path = ? WHERE id = ?", (path, ids["h2"]))
        c.commit()
        c.close()
    elif kind == "too_large":
        target.write_text("#" * (2 << 20))
    else:
        moved = tmp_path / "elsewhere"
        (d / "harnesses").rename(moved)
        (d / "harnesses").symlink_to(moved)
    p = subprocess.run([sys.executable, "-m", "harnesslearn.cli", "report", str(d)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr[-500:]
    html = (d / "report.html").read_text(encoding="utf-8")
    assert "completion.strip().split()[-1]" not in html  # h2's text, read from nowhere
    assert "a harness source file is missing" in html
    with Store.open(d, create=False) as st, pytest.raises(UserError, match="the run store is damaged") as e:
        st.harness_source(ids["h2"])
    assert "\n" not in str(e.value)
    if kind == "too_large":  # refused by its size, before reading it whole
        assert "larger than" in str(e.value)


def test_plots_are_written_only_into_a_real_folder_of_the_run_dir(tmp_path: Path) -> None:
    d = tmp_path / "run"
    full_run(d)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (d / "plots").symlink_to(elsewhere)
    with pytest.raises(UserError, match="not a folder of the run directory"):
        write_report(d)
    assert list(elsewhere.iterdir()) == [] and not (d / "report.html").exists()
