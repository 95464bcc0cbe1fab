"""The GPU machine's image lacks some of what we import (the first H200 run died importing pytz inside
reasoning_gym): every distribution that our device-side code imports at load must be on the image
(experiments/device/image-packages.txt) or carried (experiments/device/wheels.txt)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

DEVICE = Path(__file__).resolve().parents[1] / "experiments" / "device"
# what runs on the device: the tasks (reasoning_gym), search, the runtime, the engines' clients, the pipeline
MODULES = ("reasoning_gym", "harnesslearn.tasks", "harnesslearn.tools.search", "harnesslearn.runtime",
           "harnesslearn.models.openai_compat", "harnesslearn.transfer", "harnesslearn.cli")
PROBE = r'''
import importlib, importlib.metadata as md, json, sys
before = set(sys.modules)
for m in sys.argv[1:]:
    importlib.import_module(m)
new = set(sys.modules) - before
tops = {m.split(".")[0] for m in new} - set(sys.stdlib_module_names)
# a package touched only as the parent of an optional import that failed (httpx2 tries backports.zstd: the
# namespace package "backports" loads, its zstd does not) is not a dependency: nothing of it was imported
tops = {t for t in tops if not hasattr(sys.modules.get(t), "__path__") or any(m.startswith(t + ".") for m in new)}
pd = md.packages_distributions()
print(json.dumps({m: pd.get(m) for m in sorted(tops) if not m.startswith("_") and m != "harnesslearn"}))
'''


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def names(path: Path) -> set[str]:
    out = set()
    for line in path.read_text().splitlines():
        if line.startswith("# stubbed:"):
            out |= {norm(x.strip()) for x in line.split(":", 1)[1].split(",")}
        elif line.strip() and not line.startswith("#"):
            out.add(norm(line.split("==")[0].split()[0]))
    return out


def test_every_distribution_imported_on_the_device_is_on_the_image_or_carried() -> None:
    have = names(DEVICE / "image-packages.txt") | names(DEVICE / "wheels.txt")
    assert {"pytz", "reasoning-gym", "vllm", "bm25s"} <= have
    out = subprocess.run([sys.executable, "-c", PROBE, *MODULES], capture_output=True, text=True, check=True).stdout
    imported = json.loads(out)
    assert "pytz" in imported and "sympy" in imported  # the probe sees reasoning_gym's own imports
    missing = {mod: dists for mod, dists in imported.items()
               if dists is not None and not any(norm(d) in have for d in dists)}
    assert not missing, f"imported on the device but neither on the image nor in wheels.txt: {missing}"


def test_the_wheel_list_pins_one_version_of_each() -> None:
    lines = [ln.split()[0] for ln in (DEVICE / "wheels.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert all("==" in ln for ln in lines), [ln for ln in lines if "==" not in ln]
    pinned = [norm(ln.split("==")[0]) for ln in lines]
    assert len(pinned) == len(set(pinned))
