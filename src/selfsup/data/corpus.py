"""The data without Lightning: source → split → tokenizer + token cache → fixed-length windows.

    corpus = Corpus(source="builtin", vocab_size=8192)
    vocab = corpus.prepare()          # build or reuse the cache; the model needs vocab.size
    corpus.set_window(raw_length=568, batches_per_step=accumulate)

selfsup.data.datamodule.SelfSupDataModule(corpus) adds Lightning's hooks and the data loaders.
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import operator
import os
import re
import sys
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from selfsup.data.builtin import BUILTIN_MAX_CHARS, builtin_documents
from selfsup.data.cache import DocumentKeys, ShardedTokens, build_or_load, cache_key
from selfsup.data.config import TEXT_SOURCE, DataConfig, TextSource
from selfsup.data.hf_dataset import iter_hf_documents
from selfsup.data.prepare import build
from selfsup.data.pretrained_tokenizer import lab_layout, load_pretrained
from selfsup.data.sources import (
    DataError,
    drop_empty,
    file_stats,
    iter_text_file_documents,
    local_stats,
)
from selfsup.data.tokenizer import check_vocab_size, train_tokenizer, vocab_from_tokenizer
from selfsup.data.vocab import FIM_SPECIALS, Vocab

SOURCES = ("builtin", "text_files", "hf_dataset")
VERIFY = ("stat", "full")  # data.verify: what of the local data files the cache key holds
log = logging.getLogger("selfsup")


class TokenWindows(Dataset):
    """Non-overlapping windows of `length` tokens over a split's tokens; the last partial one is dropped.

    Item i is tokens[i*length : (i+1)*length] as an int64 tensor. `tokens` is a ShardedTokens (or any array):
    it pickles without its memory maps, so data-loader workers reopen the shards and never copy the corpus.
    """

    def __init__(self, tokens, length: int):
        self.tokens = tokens
        self.length = length
        self.n_windows = len(tokens) // length

    def __len__(self) -> int:
        return self.n_windows

    def __getitem__(self, index: int) -> torch.Tensor:
        index = operator.index(index)
        if not 0 <= index < self.n_windows:
            raise IndexError(f"window {index} out of range [0, {self.n_windows})")
        start = index * self.length
        return torch.from_numpy(np.asarray(self.tokens[start : start + self.length], dtype=np.int64))


class Corpus:
    """The data without Lightning: settings → documents → tokenizer + token cache → windows, and every
    check of them (paths, file contents, corpus size); SelfSupDataModule adds the Lightning hooks and
    data loaders."""

    def __init__(self, config: DataConfig | None = None, *, seed: int = 0, quiet: bool = False, **settings):
        """The corpus of a `data` config (DataConfig, which holds every setting's default), with `settings` in place
        of its fields: Corpus(source="text_files", paths=["corpus/"], vocab_size=2000). quiet: no progress lines
        while the cache is built, no notice when it is reused."""
        config = replace(config or DataConfig(), **settings)
        for f in fields(config):
            if f.name not in ("tokenizer", "seq_len", *TEXT_SOURCE):  # (the window length is the objective's)
                setattr(self, f.name, getattr(config, f.name))
        paths = [config.paths] if isinstance(config.paths, (str, os.PathLike)) else config.paths
        self.text = TextSource.of(config.source, paths, config.hf_name, config.hf_config, config.data_files)
        self.pretrained_tokenizer = str(config.tokenizer) if config.tokenizer else None
        self.num_proc = config.num_proc if config.num_proc is not None else min(os.cpu_count() or 1, 8)
        self.seed, self.quiet = seed, quiet

        # set by prepare()
        self.tokenizer = None
        self.vocab: Vocab | None = None
        self.cache_path: Path | None = None
        self.train_tokens: ShardedTokens | None = None
        self.val_tokens: ShardedTokens | None = None
        self.meta: dict = {}
        self.training_keys: DocumentKeys | None = None  # the training documents (a probe must not hold one)
        # set by set_window()
        self.raw_length: int | None = None
        self.batches_per_step = 1

    # ---- settings and documents ------------------------------------------------------------

    def _check_settings(self) -> None:
        if self.text.source not in SOURCES:
            raise DataError(f"data.source={self.text.source!r} is unknown: use one of {', '.join(SOURCES)}")
        if not 0 < self.val_fraction < 1:
            raise DataError(f"data.val_fraction={self.val_fraction} must be between 0 and 1 (e.g. 0.05)")
        if self.batch_size < 1:
            raise DataError(f"data.batch_size={self.batch_size} must be at least 1")
        if self.n_sentinels < 0:
            raise DataError(f"data.n_sentinels={self.n_sentinels} must be 0 or more")
        if self.max_documents is not None and self.max_documents < 2:
            raise DataError(f"data.max_documents={self.max_documents} must be at least 2 (or null for all)")
        if self.tokenizer_sample_chars is not None and self.tokenizer_sample_chars < 1:
            raise DataError(
                f"data.tokenizer_sample_chars={self.tokenizer_sample_chars} must be at least 1 (or null: "
                f"train the tokenizer on the whole training split)"
            )
        if self.shard_chars < 1:
            raise DataError(f"data.shard_chars={self.shard_chars} must be at least 1 (characters of text per shard)")
        if self.num_proc < 1:
            raise DataError(f"data.num_proc={self.num_proc} must be at least 1 (or null: one per core, up to 8)")
        if self.verify not in VERIFY:
            raise DataError(
                f"data.verify={self.verify!r} is unknown: use stat (file paths, sizes and modification "
                f"times) or full (hash the files' contents)"
            )
        if self.val_split is not None and self.text.source != "hf_dataset":
            raise DataError(
                f"data.val_split={self.val_split} names a split of a data set: it needs data=hf_dataset "
                f"(other sources hold out data.val_fraction of the documents)"
            )
        if self.pretrained_tokenizer is None:
            check_vocab_size(self.vocab_size, self.n_sentinels)

    def where(self) -> str:
        """A one-line description of where the documents come from."""
        if self.text.source == "builtin":
            return "builtin: pydoc topics + standard-library docstrings"
        if self.text.source == "text_files":
            return "text_files: " + ", ".join(map(str, self._paths()))
        return (
            f"hf_dataset: {self.text.hf_name}"
            + (f"/{self.text.hf_config}" if self.text.hf_config else "")
            + f" [{self.hf_split}]"
        )

    def _paths(self) -> list:
        return list(self.text.paths)

    def iter_documents(self, split: str | None = None):
        """The documents, one at a time (of the data set's split `split`; default: the training one)."""
        if self.text.source == "builtin":
            docs = iter(builtin_documents(cache_dir=self.cache_dir))
        elif self.text.source == "text_files":
            docs = iter_text_file_documents(self._paths(), self.text_field)
        else:
            docs = iter_hf_documents(
                self.text.hf_name,
                self.text.hf_config,
                split=split or self.hf_split,
                text_field=self.text_field,
                data_files=self.text.data_files,
                streaming=self.streaming,
                max_documents=None if split else self.max_documents,
                revision=self.revision,
            )
        docs = (d for d in docs if d is not None and d.strip())
        return itertools.islice(docs, self.max_documents) if self.max_documents is not None and not split else docs

    def documents(self) -> tuple[list[str], str]:
        """(every document as a list, where they came from): for small corpora and tests; training streams them."""
        docs = drop_empty(self.iter_documents())
        if not docs:
            raise DataError(f"data.source={self.text.source} gave no documents with text: check its settings")
        return docs, self.where()

    def identity(self) -> dict:
        """What identifies the corpus and its tokens without reading a document: the cache key's contents.
        With verify="full" each local data file's bytes are hashed into it (a full read) in place of its mtime."""
        content = self.verify == "full"
        spec = self.pretrained_tokenizer
        if spec:
            path = Path(spec).expanduser()
            path = path / "tokenizer.json" if path.is_dir() else path
            spec = local_stats(str(path)) if path.is_file() else spec
        settings = {
            "vocab_size": None if spec else self.vocab_size,
            "tokenizer": spec,
            "n_sentinels": self.n_sentinels,
            "fim": list(FIM_SPECIALS) if self.fim_tokens else [],  # the special tokens' layout (selfsup.data.vocab)
            "tokenizer_sample_chars": None if spec else self.tokenizer_sample_chars,
            "max_documents": self.max_documents,
            "shard_chars": self.shard_chars,
        }
        if self.text.source == "builtin":
            return {
                "source": "builtin",
                "python": sys.version,
                "max_chars": BUILTIN_MAX_CHARS,
                "val_fraction": self.val_fraction,
                **settings,
            }
        if self.text.source == "text_files":
            return {
                "source": "text_files",
                "files": file_stats(self._paths(), content),
                "text_field": self.text_field,
                "val_fraction": self.val_fraction,
                **settings,
            }
        files = self.text.data_files
        if isinstance(files, dict):
            stats = {str(k): local_stats(v, content) for k, v in sorted(files.items(), key=lambda kv: str(kv[0]))}
        else:
            stats = local_stats(files, content)
        return {
            "source": "hf_dataset",
            "name": local_stats(self.text.hf_name, content),
            "config": self.text.hf_config,
            "split": self.hf_split,
            "val_split": self.val_split,
            "revision": self.revision,
            "data_files": stats,
            "streaming": self.streaming,
            "text_field": self.text_field,
            "val_fraction": None if self.val_split else self.val_fraction,
            **settings,
        }

    def make_tokenizer(self, sample):
        """The tokenizer: BPE trained on an iterator over (a sample of) the training documents, or the pretrained
        one of data.tokenizer in the lab's layout (selfsup.data.pretrained_tokenizer)."""
        if self.pretrained_tokenizer:
            tokenizer = load_pretrained(self.pretrained_tokenizer)
            return lab_layout(tokenizer, self.n_sentinels, self.pretrained_tokenizer, fim=self.fim_tokens)
        return train_tokenizer(sample, self.vocab_size, self.n_sentinels, fim=self.fim_tokens)

    # ---- tokens ----------------------------------------------------------------------------

    def prepare(self) -> Vocab:
        """Build or reuse the token cache, load it; returns the Vocab. Idempotent. A warm start (the cache
        exists) reads no document: it is found by identity() alone."""
        if self.vocab is not None:
            return self.vocab
        self._check_settings()
        if self.text.source == "hf_dataset" and not self.text.hf_name:
            raise DataError("data.hf_name is not set: name a data set (e.g. data.hf_name=wikitext) for data=hf_dataset")
        identity = self.identity()
        val = (lambda: self.iter_documents(self.val_split)) if self.val_split else None

        def build_into(folder):
            make = self.make_tokenizer
            if self.pretrained_tokenizer:  # checked before any document is read
                tokenizer = self.make_tokenizer(iter(()))
                make = lambda sample: tokenizer  # noqa: E731
            build(
                folder,
                self.iter_documents,
                val_documents=val,
                val_fraction=self.val_fraction,
                make_tokenizer=make,
                n_sentinels=self.n_sentinels,
                num_proc=self.num_proc,
                source=self.where(),
                identity=identity,
                quiet=self.quiet,
                shard_chars=self.shard_chars,
            )

        cache = build_or_load(cache_key(identity), self.cache_dir, build_into)
        if not cache.built and not self.quiet:
            self._reuse_notice(identity)
        self.training_keys = cache.train_keys
        self.tokenizer = cache.tokenizer
        self.cache_path = cache.path
        self.train_tokens = cache.train_tokens
        self.val_tokens = cache.val_tokens
        self.meta = cache.meta
        self.vocab = vocab_from_tokenizer(cache.tokenizer, self.n_sentinels)
        return self.vocab

    def _reuse_notice(self, identity: dict) -> None:
        """What the key of a reused cache covers, where an edit could slip past it: one info line for local data
        files (short: it follows Hydra's time stamp within 100 columns), a warning for a hub data set keyed by a
        branch (or its default one), which moves while its name stays the same."""
        if (
            identity["source"] == "text_files"
            or _holds_stats(identity.get("name"))
            or _holds_stats(identity.get("data_files"))
        ):
            log.info(
                "reused token cache by file hashes (data.verify=full)"
                if self.verify == "full"
                else "reused token cache by file sizes+mtimes; data.verify=full hashes"
            )
        hub = (
            identity["source"] == "hf_dataset"
            and not _holds_stats(identity["name"])
            and not _builder(self.text.hf_name)
        )
        if hub and not re.fullmatch(r"[0-9a-f]{40}", str(self.revision or "")):
            log.warning(
                f"data.hf_name={self.text.hf_name} is not pinned to a commit (data.revision="
                f"{self.revision or 'null, its default branch'}): its token cache is reused after the branch "
                f"moves; set data.revision=<commit> (a 40-hex sha) to key the cache to one version"
            )

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


def _holds_stats(value) -> bool:
    """Whether a local_stats result holds a local file's [path, bytes, mtime or hash]."""
    if isinstance(value, dict):
        return any(map(_holds_stats, value.values()))
    if not isinstance(value, list):
        return False
    return (len(value) == 3 and isinstance(value[1], int)) or any(map(_holds_stats, value))


def _builder(name: str | None) -> bool:
    """Whether data.hf_name is one of datasets' packaged builders (json, parquet, text, ...), whose data are the
    data_files rather than a hub repository; found without importing datasets."""
    spec = importlib.util.find_spec("datasets")
    return bool(name and spec and spec.origin and (Path(spec.origin).parent / "packaged_modules" / name).is_dir())
