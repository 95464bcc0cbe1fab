"""The transfer experiment's driver: runs the stages in order, each at most once (unless forced), and
records each stage's outcome in ``WORK/ret/status.json`` as it goes; ``collect`` packs ``WORK/ret``
into a folder that fits the device tool's return path (at most 8 files of 15 MiB: small files in one
tarball, each adapter as a tar cut in parts) and ``restore`` unpacks such a folder on a fresh machine,
so that a run continues across device stretches and sessions. ``land`` takes what a stretch brought back
and makes it the committed state (``experiments/results/qwen/state``), refusing a return older than it.
"""

from __future__ import annotations

import asyncio
import gc
import gzip
import json
import shutil
import sys
import tarfile
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harnesslearn.adapters import POINTER, WEIGHTS, fill_in, stand_in
from harnesslearn.errors import UserError
from harnesslearn.fsutil import atomic_write_text
from harnesslearn.transfer import musique, stages
from harnesslearn.transfer.settings import TransferSettings

PART = 15 * 1024 * 1024  # files back through $OUT are cut into parts of this size
# folders under ret that travel as tar parts (name in $OUT -> path under ret)
ADAPTERS = {"sft_adapter": "sft_adapter", "grpo_state": "grpo/state"}


def _log(msg: str) -> None:
    print(f"[transfer {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _free_gpu() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


# the stages that resume by rows: how many of the rows their arms ask for are not in ret yet
ROWS_MISSING = {"eval": stages.eval_missing, "musique": musique.missing}


def run(s: TransferSettings) -> dict[str, Any]:
    """Run ``s.stages``, skipping those already done (eval and musique only when every row their arms ask for is
    there: they resume by rows); returns the status dict (also on disk)."""
    work = Path(s.work)
    ret = work / "ret"
    ret.mkdir(parents=True, exist_ok=True)
    status_path = ret / "status.json"
    status: dict[str, Any] = json.loads(status_path.read_text()) if status_path.is_file() else {}
    t0 = time.time()
    stages.write_json(ret / "settings.json", s.record())

    def mark(stage: str, **info: Any) -> None:
        status[stage] = {**info, "t": round(time.time() - t0, 1)}
        stages.write_json(status_path, status)

    for name in s.stages:
        if status.get(name, {}).get("state") == "done" and not s.force:
            # the row stages resume by rows: one done for some arms still runs the rows asked for and missing
            short = ROWS_MISSING[name](s, ret) if name in ROWS_MISSING else 0
            if not short:
                _log(f"{name}: done earlier, skipped")
                continue
            _log(f"{name}: done earlier, but {short} of the rows its arms ask for are missing: running them")
        mark(name, state="running")
        _log(f"{name}: started")
        t = time.time()
        try:
            if name == "sftdata":
                info = asyncio.run(stages.sftdata(s, ret))
            elif name == "sft":
                info = stages.sft(s, ret, work)
            elif name == "grpo":
                info = stages.grpo(s, ret, work)
            elif name == "eval":
                info = asyncio.run(stages.evaluate_arms(s, ret, work))
            else:
                info = asyncio.run(musique.musique(s, ret, work))
        except UserError as e:  # a setting or input the stage cannot use: its one-line reason
            info = {"state": "failed", "error": str(e)}
        except Exception:  # noqa: BLE001 - a failed stage is recorded and the next one still runs
            info = {"state": "failed", "error": traceback.format_exc()[-3000:]}
        info["seconds"] = round(time.time() - t, 1)
        mark(name, **info)
        _log(f"{name}: {info['state']} {({k: v for k, v in info.items() if k not in ('state', 'error')})}")
        if info["state"] == "failed":
            _log(info["error"])
        _free_gpu()
    mark("all", state="done", stages=list(s.stages))
    return status


def collect(work: str | Path, out: str | Path, *, adapters: bool = True) -> list[str]:
    """WORK/ret -> OUT: ``results.tgz`` (every file of ret, and WORK/log.txt) plus each adapter as
    ``NAME.tar.NN`` parts."""
    ret, dst = Path(work) / "ret", Path(out)
    dst.mkdir(parents=True, exist_ok=True)
    if not ret.is_dir():
        return []
    with tarfile.open(dst / "results.tgz", "w:gz") as tf:
        for p in sorted(ret.iterdir()):
            if p.is_file():
                tf.add(p, arcname=p.name)
        for extra in ("log.txt",):
            if (Path(work) / extra).is_file():
                tf.add(Path(work) / extra, arcname=extra)
    for ad, rel in ADAPTERS.items() if adapters else ():
        d = ret / rel
        if not d.is_dir():
            continue
        tar, scratch = Path(work) / f"{ad}.tar", Path(work) / f".{ad}.bf16"
        try:
            with tarfile.open(tar, "w") as tf:
                tf.add(_bf16_view(d, scratch), arcname=rel)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        data = tar.read_bytes()
        for k in range(0, len(data), PART):
            (dst / f"{ad}.tar.{k // PART:02d}").write_bytes(data[k:k + PART])
    return sorted(p.name for p in dst.iterdir())


def _bf16_view(adapter: Path, tmp: Path) -> Path:
    """The adapter folder as it travels back: its float32 weights in bf16 (the SFT stage saves fp32, 35 MB for
    r=32 on q/k/v/o of the 1.5B: with the GRPO state and the kernel cache that was more than the 8 files and
    64 MiB a device call returns), a copy in ``tmp``; the folder itself when nothing in it is float32. bf16 is
    what the GRPO state keeps and what vLLM serves the adapters in."""
    from safetensors import safe_open

    def has_fp32(f: Path) -> bool:  # from the file's header: no torch, no weights read (watch.sh packs every 30 s)
        with safe_open(str(f), "numpy") as st:
            return any(st.get_slice(k).get_dtype() == "F32" for k in st.keys())

    files = [f for f in sorted(adapter.glob("*.safetensors")) if has_fp32(f)]
    if not files:
        return adapter
    import torch
    from safetensors.torch import load_file, save_file

    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(adapter, tmp)
    for f in files:
        save_file({k: (t.to(torch.bfloat16) if t.dtype == torch.float32 else t).contiguous()
                   for k, t in load_file(str(f)).items()}, str(tmp / f.name), metadata={"format": "pt"})
    return tmp


# what a new chain keeps of an earlier run: its SFT data (the rows and the record of how they were collected)
NEW_CHAIN_KEEP = ("sft.jsonl", "sftdata.json", "sftdata_jobs.jsonl", "sftdata_pool.jsonl")


def restore(work: str | Path, src: str | Path, *, new_chain: bool = False) -> list[str]:
    """A folder written by ``collect`` -> WORK/ret (the resume path on a fresh machine). A folder without
    ``results.tgz`` is a plain copy of a ret folder (as committed in experiments/results/qwen/state/).

    ``new_chain``: keep only the SFT data (``NEW_CHAIN_KEEP`` and the sftdata stage's status), so that
    ``--stages sft,grpo`` trains a second chain from the same rows, with settings of its own, and no
    adapter, GRPO state or eval row of the first chain is taken for this one's. WORK/ret must not exist
    yet (or be empty)."""
    if not Path(src).is_dir():
        raise UserError(f"{src}: no such folder to restore from")
    if new_chain:
        return _restore_new_chain(Path(work), Path(src))
    ret, src = Path(work) / "ret", Path(src)
    plain = not (src / "results.tgz").is_file() and not any(src.glob("*.tar.*"))
    if plain:
        _check_state_weights(src)
    ret.mkdir(parents=True, exist_ok=True)
    if plain:
        shutil.copytree(src, ret, dirs_exist_ok=True)
        fill_in(ret)  # the committed state's final adapter is the shipped one (land's stand_in)
        return sorted(p.name for p in ret.iterdir())
    if (src / "results.tgz").is_file():
        with tarfile.open(src / "results.tgz") as tf:
            tf.extractall(ret, filter="data")
    for ad in ADAPTERS:
        parts = sorted(src.glob(f"{ad}.tar.*"))
        if parts:
            tar = Path(work) / f"{ad}.tar"
            tar.write_bytes(b"".join(p.read_bytes() for p in parts))
            with tarfile.open(tar) as tf:
                tf.extractall(ret, filter="data")
    return sorted(p.name for p in ret.iterdir())


def _check_state_weights(src: Path) -> None:
    """A committed GRPO state whose adapter weights were kept outside git (``state_zoo``: 17.5 MB would not fit
    the device calls' carry) cannot be resumed from: say so before anything is copied, instead of a loader's
    traceback on the device."""
    ad = src / "grpo" / "state" / "adapter"
    if (ad / "adapter_config.json").is_file() and not (ad / WEIGHTS).is_file() and not (ad / POINTER).is_file():
        raise UserError(f"{ad} has no {WEIGHTS} (kept outside git): copy the weights in to resume this chain, "
                        "or start a new one with --new-chain from a state that has sft.jsonl")


def _restore_new_chain(work: Path, src: Path) -> list[str]:
    """Only ``NEW_CHAIN_KEEP`` and the sftdata stage's status, read from a committed ret folder or a returned
    ``results.tgz``; built aside and moved into place whole, so a failure leaves no ``ret`` behind."""
    ret = work / "ret"
    if ret.is_file() or (ret.is_dir() and any(ret.iterdir())):
        raise UserError(f"{ret} is not empty: a new chain needs a fresh --work")
    files: dict[str, bytes] = {}
    if (src / "results.tgz").is_file():
        with tarfile.open(src / "results.tgz") as tf:
            for m in tf.getmembers():
                f = tf.extractfile(m) if m.isfile() and m.name in (*NEW_CHAIN_KEEP, "status.json") else None
                if f is not None:
                    files[m.name] = f.read()
    else:
        files = {n: (src / n).read_bytes() for n in (*NEW_CHAIN_KEEP, "status.json") if (src / n).is_file()}
    if "sft.jsonl" not in files:
        raise UserError(f"{src}: no sft.jsonl to start a new chain from")
    try:
        status = json.loads(files.pop("status.json", b"{}"))
    except ValueError as e:
        raise UserError(f"{src}: status.json is not JSON ({e})") from None
    if not isinstance(status, dict):
        raise UserError(f"{src}: status.json is not a JSON object")
    if "sftdata" in status:
        files["status.json"] = json.dumps({"sftdata": status["sftdata"]}, indent=1).encode()
    work.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".ret-", dir=work))
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        if ret.is_dir():
            ret.rmdir()  # empty, checked above
        tmp.rename(ret)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return sorted(p.name for p in ret.iterdir())


def _updates(ret: Path) -> int:
    f = ret / "grpo" / "state" / "state.json"
    return int(json.loads(f.read_text()).get("updates", 0)) if f.is_file() else -1


def _rows(f: Path) -> int:
    """Lines of a .jsonl or .jsonl.gz file (the stages' append-only logs), else -1."""
    if f.name.endswith(".jsonl.gz"):
        with gzip.open(f, "rt") as fh:
            return sum(1 for _ in fh)
    return sum(1 for _ in f.open()) if f.name.endswith(".jsonl") else -1


def _behind(ret: Path, state: Path, new: int, old: int) -> str | None:
    """Why the returned ret would undo some of the committed state, or None: its GRPO state is at an earlier
    update (``new`` < ``old``, from ``_updates``), a committed file is missing from it, or one of the stages'
    append-only logs has fewer rows."""
    if new < old:
        return f"its GRPO state is at update {new}, behind the committed one ({old})"
    for f in sorted(state.iterdir()) if state.is_dir() else []:
        if f.name == "log.txt":
            continue
        if not (ret / f.name).exists():
            return f"it has no {f.name}, which the committed state has"
        got, had = (_rows(ret / f.name), _rows(f)) if f.is_file() else (0, 0)
        if got < had:
            return f"its {f.name} has {got} rows, the committed one {had}"
    return None


BENCH_KEY = ("engine", "model", "device", "label")  # a gpu_eval.json row's identity, as gpu_eval.py writes it


def _merged_bench(returned: Path, committed: Path) -> str:
    """The committed benchmark rows with a returned ``gpu_eval.json``'s rows in: a returned row replaces the
    committed one of its engine, model, device and label, a new one is appended, the others stay."""
    def rows(p: Path) -> list[dict[str, Any]]:
        try:
            got = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"{p}: not a readable gpu_eval.json ({type(e).__name__}: {e})") from None
        if not isinstance(got, list) or not all(isinstance(r, dict) for r in got):
            raise UserError(f"{p}: a gpu_eval.json is a list of runs")
        return got

    def ident(r: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(r.get(k, "") for k in BENCH_KEY)

    new = rows(returned)
    out = rows(committed) if committed.is_file() else []
    index = {ident(r): i for i, r in enumerate(out)}
    for r in new:
        i = index.setdefault(ident(r), len(out))
        out[i:i + 1] = [r]  # in place, or appended at the end
    return json.dumps(out, indent=1) + "\n"


def land(returned: str | Path | Sequence[str | Path], state: str | Path, *, prefix: str = "q12w.",
         logs: str | Path | None = None, keep: str | Path | None = None, bench: str | Path | None = None,
         force: bool = False) -> dict[str, Any]:
    """What a device stretch brought back (``returned``: the files of ``collect``, each named ``PREFIX+NAME``
    as ``experiments/device/watch.sh`` packs them; several folders when several calls brought back parts, a file
    of a later folder taking the place of the same name in an earlier one, except ``gpu_eval.json``, whose rows
    are merged in folder order as into ``bench``) -> ``state``, the committed ret folder,
    replaced whole
    (``log.txt`` left out; the SFT adapter, which is not committed, goes to ``keep`` if given). The raw logs
    (``jobs.log``, ``metrics.log``, ``solver_start.log``, ``gpu_eval.json``) are copied into ``logs`` and a
    ``jitcache.tar`` into ``keep``; a returned ``gpu_eval.json``'s rows go into ``bench``, the committed
    benchmark file (``_merged_bench``). A return that is behind the committed state (``_behind``: an earlier GRPO
    update, a committed file missing, fewer rows in an append-only log) is refused unless ``force``: a stale
    folder must not undo a stretch. Every check runs and every copy is made before the swap, which is two
    renames in the state's folder; if it is interrupted between them the old state is put back, and a left-over
    ``.NAME.before`` (a crash there) is refused rather than deleted."""
    if not isinstance(returned, (str, Path)):
        folders = [Path(r) for r in returned]
        if len(folders) != 1:
            for f in folders:
                if not f.is_dir():
                    raise UserError(f"{f}: not a folder of returned files")
            with tempfile.TemporaryDirectory(prefix="land-") as view:
                for f in folders:  # in order: a later folder's file replaces an earlier one's
                    for p in sorted(f.iterdir()):
                        if p.name == "gpu_eval.json" and p.is_file():  # but benchmark rows add up (by BENCH_KEY)
                            text = _merged_bench(p, Path(view) / p.name)
                            (Path(view) / p.name).unlink(missing_ok=True)
                            (Path(view) / p.name).write_text(text, encoding="utf-8")
                        elif p.is_file():
                            (Path(view) / p.name).unlink(missing_ok=True)
                            (Path(view) / p.name).symlink_to(p.resolve())
                return _land(Path(view), " + ".join(map(str, folders)), Path(state), prefix, logs, keep, bench, force)
        returned = folders[0]
    return _land(Path(returned), str(returned), Path(state), prefix, logs, keep, bench, force)


def _land(src: Path, shown: str, state: Path, prefix: str, logs: str | Path | None, keep: str | Path | None,
          bench: str | Path | None, force: bool) -> dict[str, Any]:
    """``land`` from one folder (``shown``: how messages name what the user gave)."""
    picked = {p.name[len(prefix):]: p for p in sorted(src.glob(prefix + "*")) if p.is_file()} if src.is_dir() else {}
    if "results.tgz" not in picked:
        raise UserError(f"{shown}: no {prefix}results.tgz here (is it the folder a stretch's last watch brought back?)")
    before = state.parent / f".{state.name}.before"
    if before.exists():
        raise UserError(f"{before} exists: an earlier land was cut during its swap; put it back as {state} (or "
                        "remove it) first")
    tmp = state.parent / f".{state.name}.landing"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        (tmp / "src").mkdir(parents=True)
        for name, p in picked.items():
            (tmp / "src" / name).symlink_to(p.resolve())  # restore reads them where they are
        ret = tmp / "work" / "ret"
        try:
            restore(tmp / "work", tmp / "src")
            (ret / "log.txt").unlink(missing_ok=True)
            stand_in(ret)  # weights the package ships are committed once, there
            new, old = _updates(ret), _updates(state)
            why = _behind(ret, state, new, old)
        except (tarfile.TarError, gzip.BadGzipFile, EOFError, ValueError) as e:  # a part missing, a bad file
            raise UserError(f"{shown}: the returned files do not unpack ({type(e).__name__}: {e})") from e
        if not (ret / "status.json").is_file():
            raise UserError(f"{shown}: the returned results have no status.json")
        if why and not force:
            raise UserError(f"{shown}: {why}: not landed (--force lands it anyway)")
        bench_p = Path(bench) if bench is not None and (src / "gpu_eval.json").is_file() else None
        merged = _merged_bench(src / "gpu_eval.json", bench_p) if bench_p is not None else None
        copied = []
        dests = {n: logs for n in ("jobs.log", "metrics.log", "solver_start.log", "gpu_eval.json")}
        for name, dst in {**dests, "jitcache.tar": keep}.items():
            if dst is not None and (src / name).is_file():
                Path(dst).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src / name, Path(dst) / name)
                copied.append(name)
        if merged is not None and bench_p is not None:
            atomic_write_text(bench_p, merged)
            copied.append(f"gpu_eval.json rows -> {bench_p}")
        sft = ret / "sft_adapter"
        if sft.is_dir():
            if keep is not None:
                dst = Path(keep) / "sft_adapter"
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(sft, dst)
                copied.append("sft_adapter")
            shutil.rmtree(sft)
        if state.exists():
            state.rename(before)
        try:
            ret.rename(state)
        except BaseException:
            if before.exists() and not state.exists():
                before.rename(state)  # the committed state stays as it was
            raise
        shutil.rmtree(before, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"state": str(state), "grpo_updates": {"before": old, "after": new}, "forced": why if force else None,
            "files": sorted(p.name for p in state.iterdir()), "copied": copied}
