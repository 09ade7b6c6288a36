"""The data without Lightning: source → split → tokenizer + token cache → fixed-length windows.

    corpus = Corpus(source="builtin", vocab_size=8192)
    vocab = corpus.prepare()          # build or reuse the cache; the model needs vocab.size
    corpus.set_window(raw_length=568, batches_per_step=accumulate)

selfsup.data.datamodule.SelfSupDataModule(corpus) adds Lightning's hooks and the data loaders.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from selfsup.data.builtin import builtin_documents
from selfsup.data.sources import (DataError, document_hash, drop_empty, hf_documents, split_documents,
                                  text_file_documents)
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


class Corpus:
    """The data without Lightning: settings → documents → tokenizer + token cache → windows, and every
    check of them (paths, file contents, corpus size); SelfSupDataModule adds the Lightning hooks and
    data loaders."""

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
        self.training_hashes: set[str] = set()
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
            docs, where = builtin_documents(cache_dir=self.cache_dir), "builtin: pydoc topics + standard-library docstrings"
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
        train_docs, _ = split_documents(docs, self.val_fraction)
        self.training_hashes = {document_hash(d) for d in train_docs}  # what a probe task must not hold
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
