"""GPU utilisation sampling (NVML through nvidia-ml-py, else ``nvidia-smi``) for benchmarks and
experiments: ``GpuSampler().start()`` reads GPU 0 every ``interval`` seconds on a daemon thread."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any


def device_name() -> str:
    """The GPU's name (``nvidia-smi``), or ``cpu`` where there is none."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader", "-i", "0"], capture_output=True,
                                 text=True, timeout=10, check=True).stdout.strip()
            if out:
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    return "cpu"


class PeriodicSampler:
    """A daemon thread running ``_run`` (a loop on ``self._stop.wait(interval)``) between ``start`` and
    ``stop``; ``start`` does nothing when ``ready()`` is false (nothing to read here)."""

    def __init__(self, interval: float, name: str) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def ready(self) -> bool:
        return True

    def _run(self) -> None:
        raise NotImplementedError

    def start(self) -> Any:
        if self.ready():
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)


class GpuSampler(PeriodicSampler):
    """Samples GPU 0's utilisation (%) and memory (MiB). Where neither NVML nor ``nvidia-smi``
    works (no GPU), ``samples`` stays empty and ``source`` says why."""

    def __init__(self, interval: float = 1.0, origin: float = 0.0) -> None:
        super().__init__(interval, "gpu-sampler")
        self.origin = origin
        self.samples: list[tuple[float, float, float]] = []  # (time - origin, util %, memory MiB)
        self.source = "none"
        self._read = self._pick()

    def ready(self) -> bool:
        return self._read is not None

    def _pick(self) -> Callable[[], tuple[float, float]] | None:
        reasons = []
        try:
            import pynvml

            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(0)

            def nvml() -> tuple[float, float]:
                return (float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu),
                        pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20)

            nvml()
            self.source = "nvml"
            return nvml
        except Exception as e:  # noqa: BLE001 - any NVML failure means "try nvidia-smi"
            reasons.append(f"nvml: {type(e).__name__}")
        smi = shutil.which("nvidia-smi")
        if smi:
            def nvsmi() -> tuple[float, float]:
                out = subprocess.run([smi, "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
                                      "-i", "0"], capture_output=True, text=True, timeout=5, check=True).stdout
                u, m = out.strip().split(",")[:2]
                return float(u), float(m)

            try:
                nvsmi()
                self.source = "nvidia-smi"
                return nvsmi
            except (OSError, subprocess.SubprocessError, ValueError) as e:
                reasons.append(f"nvidia-smi: {e}")
        self.source = "unavailable: " + ("; ".join(reasons) or "no nvidia-smi")
        return None

    def _run(self) -> None:
        assert self._read is not None
        while not self._stop.wait(self.interval):
            try:
                u, m = self._read()
            except Exception as e:  # noqa: BLE001 - a failed read ends sampling; it must not end the run
                self.source += f" (stopped: {type(e).__name__})"
                return
            self.samples.append((round(time.time() - self.origin, 3), u, round(m, 1)))

    def busy(self, t0: float, t1: float) -> dict[str, Any]:
        """Mean utilisation (as a fraction) and peak memory over samples taken in ``[t0, t1]`` (times on
        the clock ``time.time()``)."""
        xs = [s for s in self.samples if t0 - self.origin <= s[0] <= t1 - self.origin]
        if not xs:
            return {"gpu_busy_fraction": None, "gpu_samples": 0, "gpu_memory_peak_mib": None, "gpu_source": self.source}
        return {"gpu_busy_fraction": round(sum(s[1] for s in xs) / len(xs) / 100, 3), "gpu_samples": len(xs),
                "gpu_memory_peak_mib": max(s[2] for s in xs), "gpu_source": self.source}
