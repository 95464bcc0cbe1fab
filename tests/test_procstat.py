"""harnesslearn.procstat: each process's CPU between two snapshots of /proc, and the host's."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from harnesslearn import procstat


def test_a_busy_process_shows_up_with_its_cores_and_its_group() -> None:
    spin = subprocess.Popen([sys.executable, "-c", "# procstat-spin-marker\nimport time\nend = time.time() + 30\n"
                             "while time.time() < end: pass"])
    try:
        time.sleep(0.3)
        a, t0 = procstat.snapshot(), time.monotonic()
        time.sleep(1.5)
        b, t1 = procstat.snapshot(), time.monotonic()
    finally:
        spin.kill()
        spin.wait()
    got = procstat.between(a, b, t1 - t0, top=50, groups={"spin": ("procstat-spin-marker",), "none": ("no-such-cmd",)})
    mine = [p for p in got["cpu_top"] if p["pid"] == spin.pid]
    # a busy loop gets a share of a core even on a loaded 2-core machine; its own /proc figure agrees
    assert mine and mine[0]["cores"] > 0.05 and "procstat-spin-marker" in mine[0]["cmd"]
    assert got["spin_cores"] == mine[0]["cores"] and got["none_cores"] == 0
    assert abs(b.cpu[spin.pid] - a.cpu[spin.pid] - mine[0]["cores"] * (t1 - t0)) < 0.05
    assert got["host_cores"] == os.cpu_count() and got["host_busy_cores"] >= mine[0]["cores"] - 0.05
    assert got["cpu_top"] == sorted(got["cpu_top"], key=lambda p: -p["cores"])


def test_a_pid_reused_by_another_command_is_not_counted() -> None:
    a = procstat.Snapshot({1: 5.0, 2: 1.0}, {1: "init", 2: "old"}, 100, 1000)
    b = procstat.Snapshot({1: 6.0, 2: 9.0, 3: 4.0}, {1: "init", 2: "new", 3: "born"}, 300, 2000)
    got = procstat.between(a, b, 2.0)
    assert [(p["pid"], p["cores"]) for p in got["cpu_top"]] == [(1, 0.5)]  # 2 changed command, 3 was born
    assert got["host_busy_cores"] == round(200 / 1000 * (os.cpu_count() or 1), 2)


def test_proc_cpu_of_a_gone_process_raises_oserror() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    try:
        procstat.proc_cpu(p.pid)
    except OSError:
        return
    raise AssertionError("a reaped process still had /proc/PID/stat")  # pid reused at once: vanishingly rare
