"""LoRA adapters shipped with the package: proposers trained by the project's transfer experiment
(``experiments/qwen12.py``), usable on the CPU as ``local:MODEL?adapter=NAME``.

``rl``: Qwen2.5-Coder-1.5B-Instruct after SFT on 187 teacher-free rows and one GRPO epoch (640 contexts, 80
updates) on the 5 paper-train families. On the 21 unseen paper-eval families it beats the untrained proposer (mean
test J 0.517 against 0.239, +0.279 [+0.125, +0.441] with the families resampled) and stays below the best zoo
harness (0.571, -0.054 [-0.124, -0.001]); all 14 of its winning revisions are near-copies of the zoo's interpreter
loop (``README.md`` beside the weights). A name is looked up before a path: ``adapter=./rl`` is a folder ``rl``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from harnesslearn.errors import UserError
from harnesslearn.fsutil import sha256_file

HERE = Path(__file__).parent
WEIGHTS = "adapter_model.safetensors"
POINTER = "SHIPPED.json"  # stands in a folder for weights that a shipped adapter holds: {"adapter", "sha256"}
SHIPPED: dict[str, tuple[str, str]] = {  # name -> (the local: model it was trained on, its folder here)
    "rl": ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-1.5b-instruct-rl"),
}
# name -> the family set (tasks.families.FAMILY_SETS) its SFT rows and GRPO contexts came from
TRAINED_ON: dict[str, str] = {"rl": "paper-train"}


def training_families(spec: str) -> list[str] | None:
    """The Reasoning Gym families a proposer spec was trained on, when it names a shipped adapter on the model it
    was trained on (``local:MODEL?adapter=NAME``); None for any other spec (not trained here, or not known)."""
    from harnesslearn.specs import parse_spec
    from harnesslearn.tasks.families import family_set

    try:
        s = parse_spec(spec, "model spec")
    except UserError:
        return None
    name = s.options.get("adapter", "")
    if s.prefix != "local" or name not in TRAINED_ON or SHIPPED[name][0] != s.name:
        return None
    return family_set(TRAINED_ON[name])


def resolve(model: str, adapter: str) -> str:
    """``adapter`` as given (a folder), or the folder of the shipped adapter of that name; a UserError when the
    shipped adapter was trained on another model than ``model`` (its shapes would not fit)."""
    if adapter not in SHIPPED:
        if "/" not in adapter and not Path(adapter).exists():
            raise UserError(f"adapter {adapter!r}: no such folder, and not a shipped adapter "
                            f"({', '.join(sorted(SHIPPED))})")
        return adapter
    base, folder = SHIPPED[adapter]
    if model != base:
        raise UserError(f"adapter {adapter!r} was trained on local:{base}, not local:{model}")
    return str(HERE / folder)


def stand_in(folder: Path) -> list[Path]:
    """Under ``folder``, each adapter's weights that are byte for byte a shipped adapter's are replaced by a
    ``POINTER`` file (the name and the sha256). The committed GRPO state keeps its final adapter this way, not as
    a second 17.5 MB copy: every device call carries the repository's tracked files within its 64 MiB. Returns the
    weights replaced."""
    shipped = {sha256_file(HERE / d / WEIGHTS): name for name, (_, d) in SHIPPED.items()}
    out = []
    for w in sorted(folder.rglob(WEIGHTS)):
        sha = sha256_file(w)
        if sha in shipped and not w.is_relative_to(HERE):
            (w.parent / POINTER).write_text(json.dumps({"adapter": shipped[sha], "sha256": sha}) + "\n")
            w.unlink()
            out.append(w)
    return out


def fill_in(folder: Path) -> list[Path]:
    """The reverse of ``stand_in``: each ``POINTER`` under ``folder`` becomes the shipped weights it names again,
    their sha256 checked (a UserError names a pointer this package cannot fill). Returns the weights written."""
    out = []
    for p in sorted(folder.rglob(POINTER)):
        try:
            rec = json.loads(p.read_text())
            name, sha = rec["adapter"], rec["sha256"]
        except (ValueError, KeyError, TypeError) as e:
            raise UserError(f"{p}: not a shipped adapter's pointer ({type(e).__name__}: {e})") from None
        if name not in SHIPPED:
            raise UserError(f"{p}: names the shipped adapter {name!r}, which this harnesslearn does not ship")
        src = HERE / SHIPPED[name][1] / WEIGHTS
        if sha256_file(src) != sha:
            raise UserError(f"{p}: this harnesslearn's adapter {name!r} is not the one recorded (sha256 differs)")
        shutil.copyfile(src, p.parent / WEIGHTS)
        p.unlink()
        out.append(p.parent / WEIGHTS)
    return out
