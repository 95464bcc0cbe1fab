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
        a = procstat.snapshot()
        time.sleep(1.5)
        b = procstat.snapshot()
    finally:
        spin.kill()
        spin.wait()
    got = procstat.between(a, b, top=50, groups={"spin": ("procstat-spin-marker",), "none": ("no-such-cmd",)})
    mine = [p for p in got["cpu_top"] if p["pid"] == spin.pid]
    # a busy loop gets a share of a core even on a loaded 2-core machine, and one thread never more than one
    assert mine and 0.05 < mine[0]["cores"] <= 1.1 and "procstat-spin-marker" in mine[0]["cmd"]
    assert got["spin_cores"] == mine[0]["cores"] and got["none_cores"] == 0
    assert procstat.between(a, b, groups={"spin": ("procstat-spin-marker",)}, exclude=(spin.pid,))["spin_cores"] == 0
    own, _ = procstat.used(a, b, [spin.pid])
    assert abs(own / (b.t - a.t) - mine[0]["cores"]) < 0.02
    # the host: /proc/stat counts every CPU the kernel has (ticks per second), busy at least as much as the spinner
    assert 1 <= got["host_cores"] <= (os.cpu_count() or 1) + 0.5
    assert got["host_busy_cores"] >= mine[0]["cores"] - 0.05
    assert got["cpu_top"] == sorted(got["cpu_top"], key=lambda p: -p["cores"])


def test_a_reused_pid_is_another_process_and_a_renamed_one_the_same() -> None:
    a = procstat.Snapshot(0.0, {(1, 10): (5.0, 0.0), (2, 20): (1.0, 0.0), (4, 40): (1.0, 0.5)},
                          {(1, 10): "init", (2, 20): "old", (4, 40): "ray::Shard"}, 100, 1000,
                          {1: (1, 10), 2: (2, 20), 4: (4, 40)})
    b = procstat.Snapshot(2.0, {(1, 10): (6.0, 0.0), (2, 99): (9.0, 0.0), (3, 30): (4.0, 0.0), (4, 40): (3.0, 1.5)},
                          {(1, 10): "init", (2, 99): "new", (3, 30): "born", (4, 40): "ray::Shard.run"}, 300, 2000,
                          {1: (1, 10), 2: (2, 99), 3: (3, 30), 4: (4, 40)})
    got = procstat.between(a, b)
    # pid 2 was reused (another start time), 3 was born: neither counts; 4 renamed itself and still counts
    assert [(p["pid"], p["cores"]) for p in got["cpu_top"]] == [(4, 1.0), (1, 0.5)]
    assert procstat.used(a, b, [2, 4]) == (2.0, 1.0) and procstat.used(a, b) == (3.0, 1.0)


def test_host_ticks_leave_guest_time_out_and_count_iowait_as_idle() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    assert procstat.host_ticks("cpu  10 1 5 100 7 2 3 4 50 0") == (25, 132)
    assert procstat.host_ticks("cpu  10 1 5 100") == (16, 116)  # an old kernel's shorter line


def test_proc_cpu_of_a_gone_process_raises_oserror() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    try:
        procstat.proc_cpu(p.pid)
    except OSError:
        return
    raise AssertionError("a reaped process still had /proc/PID/stat")  # pid reused at once: vanishingly rare
