"""The LightningDataModule: source → split → tokenizer + token cache → fixed-length windows.

Usage by the lab:

    dm = SelfSupDataModule(source="builtin", vocab_size=8192)
    vocab = dm.prepare()              # build or reuse the cache; the model needs vocab.size
    dm.set_window(raw_length=568, batches_per_step=accumulate)
    trainer.fit(module, datamodule=dm)
"""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from selfsup.data.sources import DataError, builtin_documents, drop_empty, hf_documents, text_file_documents
from selfsup.data.tokenizer import build_or_load_cache, check_vocab_size, vocab_from_tokenizer
from selfsup.data.vocab import Vocab

SOURCES = ("builtin", "text_files", "hf_dataset")


class TokenWindows(Dataset):
    """Non-overlapping windows of `length` tokens over a flat token array; the last partial one is dropped.

    Item i is tokens[i*length : (i+1)*length] as an int64 tensor. Pickles without the array (a
    worker process reopens the memmap from `path`), so workers never copy the corpus.
    """

    def __init__(self, path: str | os.PathLike, length: int, tokens: np.ndarray | None = None):
        self.path = str(path)
        self.length = length
        self._tokens = tokens
        self.n_windows = len(self.tokens) // length

    @property
    def tokens(self) -> np.ndarray:
        if self._tokens is None:
            self._tokens = np.load(self.path, mmap_mode="r")
        return self._tokens

    def __len__(self) -> int:
        return self.n_windows

    def __getitem__(self, index: int) -> torch.Tensor:
        index = operator.index(index)
        if not 0 <= index < self.n_windows:
            raise IndexError(f"window {index} out of range [0, {self.n_windows})")
        start = index * self.length
        return torch.from_numpy(np.asarray(self.tokens[start : start + self.length], dtype=np.int64))

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tokens": None}


class SelfSupDataModule(L.LightningDataModule):
    def __init__(
        self,
        source: str = "builtin",
        paths: Sequence[str | os.PathLike] = (),
        text_field: str = "text",
        hf_name: str | None = None,
        hf_config: str | None = None,
        hf_split: str = "train",
        data_files=None,
        streaming: bool = False,
        max_documents: int | None = None,
        vocab_size: int = 8192,
        n_sentinels: int = 100,
        val_fraction: float = 0.05,
        batch_size: int = 32,
        num_workers: int = 0,
        cache_dir: str | os.PathLike = ".cache/selfsup",
        seed: int = 0,
    ):
        super().__init__()
        self.source = source
        self.paths = paths
        self.text_field = text_field
        self.hf_name = hf_name
        self.hf_config = hf_config
        self.hf_split = hf_split
        self.data_files = data_files
        self.streaming = streaming
        self.max_documents = max_documents
        self.vocab_size = vocab_size
        self.n_sentinels = n_sentinels
        self.val_fraction = val_fraction
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.cache_dir = cache_dir
        self.seed = seed

        # set by prepare()
        self.tokenizer = None
        self.vocab: Vocab | None = None
        self.cache_path: Path | None = None
        self.train_tokens: np.ndarray | None = None
        self.val_tokens: np.ndarray | None = None
        self.meta: dict = {}
        # set by set_window()
        self.raw_length: int | None = None
        self.batches_per_step = 1

    # ---- settings and documents ------------------------------------------------------------

    def _check_settings(self) -> None:
        if self.source not in SOURCES:
            raise DataError(f"data.source={self.source!r} is unknown: use one of {', '.join(SOURCES)}")
        if not 0 < self.val_fraction < 1:
            raise DataError(f"data.val_fraction={self.val_fraction} must be between 0 and 1 (e.g. 0.05)")
        if self.batch_size < 1:
            raise DataError(f"data.batch_size={self.batch_size} must be at least 1")
        if self.n_sentinels < 0:
            raise DataError(f"data.n_sentinels={self.n_sentinels} must be 0 or more")
        if self.max_documents is not None and self.max_documents < 2:
            raise DataError(f"data.max_documents={self.max_documents} must be at least 2 (or null for all)")
        check_vocab_size(self.vocab_size, self.n_sentinels)

    def documents(self) -> tuple[list[str], str]:
        """(documents, a one-line description of where they came from)."""
        if self.source == "builtin":
            docs, where = builtin_documents(), "builtin: pydoc topics + standard-library docstrings"
        elif self.source == "text_files":
            paths = [self.paths] if isinstance(self.paths, (str, os.PathLike)) else list(self.paths or ())
            docs, where = text_file_documents(paths, self.text_field), "text_files: " + ", ".join(map(str, paths))
        else:
            docs = hf_documents(
                self.hf_name,
                self.hf_config,
                split=self.hf_split,
                text_field=self.text_field,
                data_files=self.data_files,
                streaming=self.streaming,
                max_documents=self.max_documents,
            )
            where = (
                f"hf_dataset: {self.hf_name}" + (f"/{self.hf_config}" if self.hf_config else "") + f" [{self.hf_split}]"
            )
        docs = drop_empty(docs)
        if self.max_documents is not None:
            docs = docs[: self.max_documents]
        if not docs:
            raise DataError(f"data.source={self.source} gave no documents with text: check its settings")
        return docs, where

    # ---- tokens ----------------------------------------------------------------------------

    def prepare(self) -> Vocab:
        """Gather documents, build or reuse the token cache, load it; returns the Vocab. Idempotent."""
        if self.vocab is not None:
            return self.vocab
        self._check_settings()
        docs, where = self.documents()
        cache = build_or_load_cache(
            docs,
            cache_dir=self.cache_dir,
            val_fraction=self.val_fraction,
            vocab_size=self.vocab_size,
            n_sentinels=self.n_sentinels,
            source=where,
        )
        self.tokenizer = cache.tokenizer
        self.cache_path = cache.path
        self.train_tokens = cache.train_tokens
        self.val_tokens = cache.val_tokens
        self.meta = cache.meta
        self.vocab = vocab_from_tokenizer(cache.tokenizer, self.n_sentinels)
        return self.vocab

    def set_window(self, raw_length: int, batches_per_step: int = 1) -> None:
        """Cut both splits into windows of raw_length tokens; a train batch holds batch_size * batches_per_step."""
        if raw_length < 1 or batches_per_step < 1:
            raise DataError(f"window length {raw_length} and batches per step {batches_per_step} must be at least 1")
        self.prepare()
        step = self.batch_size * batches_per_step
        n_train, n_val = len(self.train_tokens), len(self.val_tokens)
        if n_train // raw_length < step:
            raise DataError(
                f"corpus too small for one batch: {n_train} training tokens give {n_train // raw_length} windows "
                f"of {raw_length} tokens, a step needs {step}: lower data.batch_size or data.seq_len, or add text"
            )
        if n_val // raw_length < 1:
            raise DataError(
                f"validation split too small: {n_val} validation tokens give 0 windows of {raw_length} tokens: "
                f"raise data.val_fraction, lower data.seq_len, or add text"
            )
        self.raw_length = raw_length
        self.batches_per_step = batches_per_step

    # ---- Lightning -------------------------------------------------------------------------

    def prepare_data(self) -> None:
        self.prepare()  # builds the cache once per node; other ranks then reuse it in setup()

    def setup(self, stage: str | None = None) -> None:
        self.prepare()

    def _windows(self, split: str) -> TokenWindows:
        if self.raw_length is None:
            raise RuntimeError("call set_window(raw_length) on the data module before asking for data loaders")
        self.prepare()
        tokens = self.train_tokens if split == "train" else self.val_tokens
        return TokenWindows(self.cache_path / f"{split}.npy", self.raw_length, tokens)

    def _rank_world(self) -> tuple[int, int]:
        trainer = getattr(self, "trainer", None)
        return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)

    def train_dataloader(self) -> DataLoader:
        rank, world = self._rank_world()
        windows = self._windows("train")
        batch = self.batch_size * self.batches_per_step
        sampler = ShardedSampler(len(windows), rank, world, seed=self.seed, shuffle=True)
        trainer = getattr(self, "trainer", None)
        if trainer is not None and trainer.global_step:  # resumed mid-epoch: continue where that epoch was
            sampler.skip = (trainer.global_step % (len(sampler) // batch)) * batch
        return DataLoader(
            windows,
            batch_size=batch,
            sampler=sampler,
            drop_last=True,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def val_dataloader(self) -> DataLoader:
        rank, world = self._rank_world()
        windows = self._windows("val")
        return DataLoader(
            windows,
            batch_size=self.batch_size,
            sampler=ShardedSampler(len(windows), rank, world, shuffle=False, even=False),
            drop_last=False,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )


class ShardedSampler(torch.utils.data.Sampler):
    """Window indices for one rank: a seeded permutation per epoch, dealt out rank by rank.

    The ranks' shares are disjoint and together cover the permutation. Training uses even=True:
    every rank gets len // world indices (the len % world leftovers, different ones each epoch,
    wait for the next epoch), so all ranks run the same number of steps. Validation uses
    even=False: every window is evaluated exactly once (ranks may differ by one). Lightning is told
    not to replace it (use_distributed_sampler=False); it calls set_epoch at each epoch.
    """

    def __init__(self, length: int, rank: int = 0, world: int = 1, seed: int = 0, shuffle: bool = True,
                 even: bool = True):
        self.length, self.rank, self.world, self.seed = length, rank, world, seed
        self.shuffle, self.even, self.epoch = shuffle, even, 0
        self.skip = 0  # indices to skip once, at the next iteration (resuming mid-epoch)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def indices(self) -> list[int]:
        if self.shuffle:
            order = torch.randperm(self.length, generator=torch.Generator().manual_seed(self.seed * 100_003 + self.epoch))
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
