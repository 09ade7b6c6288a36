"""Throughput through Lightning's ThroughputMonitor, logged under the names in DESIGN.md."""

from __future__ import annotations

from lightning.pytorch.callbacks import ThroughputMonitor

NAMES = {"train/items_per_sec": "perf/tokens_per_sec", "train/device/items_per_sec": "perf/device_tokens_per_sec",
         "train/samples_per_sec": "perf/samples_per_sec", "train/flops_per_sec": "perf/flops_per_sec",
         "train/device/flops_per_sec": "perf/device_flops_per_sec", "train/device/mfu": "perf/mfu"}


class TokenThroughput(ThroughputMonitor):
    """Counts input tokens (all positions of each [B, L] window) and logs perf/tokens_per_sec, perf/mfu."""

    def __init__(self, window_size: int = 20):
        super().__init__(batch_size_fn=lambda batch: batch.size(0), length_fn=lambda batch: batch.numel(),
                         window_size=window_size)

    def _compute(self, trainer, iter_num=None) -> None:
        if not trainer._logger_connector.should_update_logs:
            return
        stage = trainer.state.stage
        if stage is None or stage.value != "train":
            return
        metrics = self._throughputs[stage].compute()
        if trainer.world_size == 1:  # Lightning adds the global numbers only for several devices
            metrics.update({k.removeprefix("device/"): v for k, v in metrics.items()
                            if k in ("device/items_per_sec", "device/samples_per_sec", "device/flops_per_sec")})
        renamed = {NAMES[f"train/{k}"]: v for k, v in metrics.items() if f"train/{k}" in NAMES}
        if renamed:
            trainer._logger_connector.log_metrics(renamed, step=iter_num)
