"""Throughput, FLOP/s, MFU and peak memory through Lightning's Throughput meter, under the
names in DESIGN.md (perf/tokens_per_sec, perf/mfu, ...).

FLOPs per batch are counted, not estimated: before the first step the module counts the forward pass
of its first batch with torch's FlopCounterMode (SelfSupModule.count_flops). MFU needs the device's
peak: Lightning knows it for most GPUs (a few names it misses are below); on CPU we measure this
machine's fp32 matmul peak once.
"""

from __future__ import annotations

import functools
import time
import warnings

import torch
from lightning.fabric.utilities.throughput import Throughput, get_available_flops
from lightning.pytorch.callbacks import Callback

from selfsup.common.memory import peak_rss_mb

NAMES = {
    "train/items_per_sec": "perf/tokens_per_sec",
    "train/device/items_per_sec": "perf/device_tokens_per_sec",
    "train/samples_per_sec": "perf/samples_per_sec",
    "train/flops_per_sec": "perf/flops_per_sec",
    "train/device/flops_per_sec": "perf/device_flops_per_sec",
    "train/device/mfu": "perf/mfu",
}


@functools.lru_cache(maxsize=1)
def cpu_matmul_peak(n: int = 512, repeats: int = 10) -> float:
    """Best measured fp32 FLOP/s of an n x n matmul on this machine with torch's current threads (n=512 reads
    within 2% of n=2048 on the CPU machine of docs/benchmarks.md: 167 / 164 GFLOP/s on one thread, 333 / 329 on
    two; in 0.02 s instead of 1.3 s)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best


# Lightning 2.6 names "H200 SXM1"/"NVL1" but not the plain "NVIDIA H200" (SXM) that drivers report;
# its spec is the H100 SXM's (dense, no sparsity).
EXTRA_GPU_FLOPS = {
    "h200": {torch.float32: 66.9e12, "tfloat32": 494.7e12, torch.bfloat16: 989.4e12, torch.float16: 989.4e12}
}


def gpu_peak_flops(device: torch.device, precision: str) -> float | None:
    """The device's spec FLOP/s for a Lightning precision ("bf16-mixed", "16-mixed", "32", ...)."""
    if "bf16" in precision:
        dtype = torch.bfloat16
    elif "16" in precision:
        dtype = torch.float16
    else:
        dtype = "tfloat32" if torch.get_float32_matmul_precision() != "highest" else torch.float32
    with warnings.catch_warnings():  # "FLOPs not found for 'NVIDIA H200'": the table below has it
        warnings.filterwarnings("ignore", message="FLOPs not found")
        peak = get_available_flops(device, dtype)
    if peak is not None or device.type != "cuda":
        return peak
    name = torch.cuda.get_device_name(device).lower()
    table = next((t for chip, t in EXTRA_GPU_FLOPS.items() if chip in name), {})
    return table.get(dtype)


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return peak_rss_mb()


class TokenThroughput(Callback):
    """Training throughput as perf/* metrics, with Lightning's (public) Throughput meter: input tokens (all
    positions of each [B, L] window), windows, FLOPs (the module's counted `flops_per_batch`) and MFU, per
    second of training time (validation, evaluation, checkpoints and the first step, which compiles and
    initialises, excluded), over the last `window_size` steps; peak memory. Logged with the train metrics
    (every trainer.log_every_n_steps). `tokens_per_sec()`: the average over the whole fit, on the same clock."""

    def __init__(self, window_size: int = 20):
        self.window_size = window_size
        self.meter: Throughput | None = None
        self.available_flops = None

    def setup(self, trainer, pl_module, stage: str) -> None:
        device = trainer.strategy.root_device
        with warnings.catch_warnings():  # Lightning's peak table misses some GPUs: EXTRA_GPU_FLOPS has them
            warnings.filterwarnings("ignore", message="FLOPs not found")
            self.available_flops = (
                cpu_matmul_peak() if device.type == "cpu" else gpu_peak_flops(device, str(trainer.precision))
            )
        if self.available_flops is None and trainer.is_global_zero:
            warnings.warn(
                f"perf/mfu is not logged: no peak FLOP/s known for {device} "
                f"(add it to selfsup.training.throughput.EXTRA_GPU_FLOPS)"
            )

    def on_train_start(self, trainer, pl_module) -> None:
        self.meter = Throughput(
            available_flops=self.available_flops, world_size=trainer.world_size, window_size=self.window_size
        )
        self.start, self.paused, self.warming_up = time.perf_counter(), 0.0, True
        self.batches = self.samples = self.tokens = 0

    def training_seconds(self) -> float:
        return time.perf_counter() - self.start - self.paused

    def on_validation_start(self, trainer, pl_module) -> None:
        self.pause_start = time.perf_counter()

    def on_validation_end(self, trainer, pl_module) -> None:
        if self.meter is not None:
            self.paused += time.perf_counter() - self.pause_start

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize()
        if self.warming_up:  # the first step (compilation, lazy initialisation) is not on the clock
            self.warming_up = False
            self.start, self.paused = time.perf_counter(), 0.0
            return
        self.batches += 1
        self.samples += batch.size(0)
        self.tokens += batch.numel()
        self.meter.update(
            time=self.training_seconds(),
            batches=self.batches,
            samples=self.samples,
            lengths=self.tokens,
            flops=getattr(pl_module, "flops_per_batch", None),
        )
        if trainer.global_step % trainer.log_every_n_steps and not trainer.should_stop:
            return
        metrics = self.meter.compute()
        if trainer.world_size == 1:  # the meter adds the global numbers only for several devices
            metrics.update(
                {
                    k.removeprefix("device/"): v
                    for k, v in metrics.items()
                    if k in ("device/items_per_sec", "device/samples_per_sec", "device/flops_per_sec")
                }
            )
        renamed = {NAMES[f"train/{k}"]: float(v) for k, v in metrics.items() if f"train/{k}" in NAMES}
        renamed["perf/peak_memory_mb"] = peak_memory_mb(trainer.strategy.root_device)
        pl_module.log_dict(renamed, on_step=True, on_epoch=False, rank_zero_only=True)

    def tokens_per_sec(self) -> float | None:
        """Input tokens per second of training time over this fit (global: all ranks' tokens)."""
        if self.meter is None or not self.batches:
            return None
        return self.tokens * self.meter.world_size / self.training_seconds()
