"""Long run (slow, outside CI's default run): 10,000 steps with a checkpoint every 500 keep resident
memory flat — growth under 5% after warm-up."""

import lightning as L
import pytest
import torch

from selfsup.common.memory import rss_mb
from selfsup.data.vocab import Vocab
from selfsup.models import build_model
from selfsup.objectives import CausalLM
from selfsup.optim import AdamWCosine
from selfsup.reliability.callbacks import LastCheckpoint
from selfsup.training.module import SelfSupModule


class MemoryProbe(L.Callback):
    def __init__(self, warmup: int):
        self.warmup, self.after_warmup, self.peak = warmup, None, 0.0

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.warmup:
            self.after_warmup = rss_mb()
        if trainer.global_step > self.warmup and trainer.global_step % 100 == 0:
            self.peak = max(self.peak, rss_mb())


@pytest.mark.slow
def test_ten_thousand_steps_keep_resident_memory_flat(tmp_path):
    torch.manual_seed(0)
    vocab = Vocab(size=300, n_sentinels=4)
    module = SelfSupModule(
        build_model("decoder", vocab.size, 16, d_model=16, n_layers=1, n_heads=2),
        CausalLM(vocab, 16),
        AdamWCosine(warmup_steps=10),
        max_steps=10_000,
    )
    data = torch.randint(vocab.first_ordinary, vocab.size, (4096, 17))
    probe = MemoryProbe(warmup=1000)
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=10_000,
        logger=False,  # LastCheckpoint is its checkpointing
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=str(tmp_path),
        callbacks=[LastCheckpoint(tmp_path / "last.ckpt", every_n_steps=500), probe],
    )
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=4, shuffle=True))
    assert trainer.global_step == 10_000 and (tmp_path / "last.ckpt").is_file()
    assert probe.peak < probe.after_warmup * 1.05, (probe.after_warmup, probe.peak)
