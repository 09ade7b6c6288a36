"""The LightningDataModule: a prepared Corpus (selfsup.data.corpus) with Lightning's hooks and data loaders.

corpus = Corpus(source="builtin", vocab_size=8192)
vocab = corpus.prepare()          # build or reuse the cache; the model needs vocab.size
corpus.set_window(raw_length=568, batches_per_step=accumulate)
trainer.fit(module, datamodule=SelfSupDataModule(corpus))
"""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import DataLoader

from selfsup.data.corpus import Corpus, TokenWindows

__all__ = ["SelfSupDataModule", "ShardedSampler"]


class SelfSupDataModule(L.LightningDataModule):
    def __init__(self, corpus: Corpus):
        super().__init__()
        self.corpus = corpus

    # ---- Lightning -------------------------------------------------------------------------

    def prepare_data(self) -> None:
        self.corpus.prepare()  # builds the cache once per node; other ranks then reuse it in setup()

    def setup(self, stage: str | None = None) -> None:
        self.corpus.prepare()

    def _windows(self, split: str) -> TokenWindows:
        c = self.corpus
        if c.raw_length is None:
            raise RuntimeError("call set_window(raw_length) on the corpus before asking for data loaders")
        c.prepare()
        tokens = c.train_tokens if split == "train" else c.val_tokens
        return TokenWindows(tokens, c.raw_length)

    def _rank_world(self) -> tuple[int, int]:
        trainer = getattr(self, "trainer", None)
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def train_dataloader(self) -> DataLoader:
        rank, world = self._rank_world()
        windows = self._windows("train")
        batch = self.corpus.batch_size * self.corpus.batches_per_step
        sampler = ShardedSampler(len(windows), rank, world, seed=self.corpus.seed, shuffle=True)
        trainer = getattr(self, "trainer", None)
        if trainer is not None and trainer.global_step:  # resumed mid-epoch: continue where that epoch was
            sampler.skip = (trainer.global_step % (len(sampler) // batch)) * batch
        return DataLoader(
            windows,
            batch_size=batch,
            sampler=sampler,
            drop_last=True,
            num_workers=self.corpus.num_workers,
            persistent_workers=self.corpus.num_workers > 0,
        )

    def val_dataloader(self) -> DataLoader:
        rank, world = self._rank_world()
        windows = self._windows("val")
        return DataLoader(
            windows,
            batch_size=self.corpus.batch_size,
            sampler=ShardedSampler(len(windows), rank, world, shuffle=False, even=False),
            drop_last=False,
            num_workers=self.corpus.num_workers,
            persistent_workers=self.corpus.num_workers > 0,
        )


class ShardedSampler(torch.utils.data.Sampler):
    """Window indices for one rank: a seeded permutation per epoch, dealt out rank by rank.

    The ranks' shares are disjoint and together cover the permutation. Training uses even=True:
    every rank gets len // world indices (the len % world leftovers, different ones each epoch,
    wait for the next epoch), so all ranks run the same number of steps. Validation uses
    even=False: every window is evaluated exactly once (ranks may differ by one). Lightning is told
    not to replace it (use_distributed_sampler=False); it calls set_epoch at each epoch.
    """

    def __init__(
        self, length: int, rank: int = 0, world: int = 1, seed: int = 0, shuffle: bool = True, even: bool = True
    ):
        self.length, self.rank, self.world, self.seed = length, rank, world, seed
        self.shuffle, self.even, self.epoch = shuffle, even, 0
        self.skip = 0  # indices to skip once, at the next iteration (resuming mid-epoch)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def indices(self) -> list[int]:
        if self.shuffle:
            order = torch.randperm(
                self.length, generator=torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
            )
        else:
            order = torch.arange(self.length)
        if self.even:
            order = order[: self.length - self.length % self.world]
        return order[self.rank :: self.world].tolist()

    def __iter__(self):
        skip, self.skip = self.skip, 0
        return iter(self.indices()[skip:])

    def __len__(self) -> int:
        full = self.length // self.world if self.even else len(range(self.rank, self.length, self.world))
        return full - self.skip
