"""Building the token cache (selfsup.data.cache) from a stream of documents, on Hugging Face `datasets`.

The documents go into an Arrow table on disk (`datasets.Dataset.from_generator`: written in batches, never the
whole corpus in memory) with each one's 64-bit key and length; the split is computed from the keys (or a data
set's own validation split is streamed the same way); the tokenizer trains on a bounded sample of the training
split; `Dataset.map` tokenizes slices of about `shard_chars` characters in `num_proc` worker processes, each
slice becoming one shard; meta.json is written last and the Arrow scratch deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from selfsup.data.cache import FORMAT_VERSION, TokenCache, build_or_load, cache_key, chunk_checksums, end_checksum
from selfsup.data.hf_dataset import quiet_datasets
from selfsup.data.sources import DataError, document_key, split_keys
from selfsup.data.tokenizer import check_vocab_size, load_tokenizer_json, train_tokenizer
from selfsup.data.vocab import FIM_SPECIALS, Vocab

SHARD_CHARS = 64_000_000  # default characters per shard (data.shard_chars): one Dataset.map call each
PARALLEL_CHARS = 4_000_000  # a slice this large is tokenized in num_proc processes (starting them costs ~1 s)


class Progress:
    """Lines on stderr while preparing, at most one per `every` seconds (none for a corpus done sooner):
    characters (as MB) and documents per second, and what is left."""

    every = 2.0

    def __init__(self, total_chars: int, quiet: bool = False):
        self.total_chars, self.quiet = total_chars, quiet
        self.started = self.shown = time.perf_counter()
        self.chars = self.docs = 0

    def add(self, chars: int, docs: int) -> None:
        self.chars += chars
        self.docs += docs
        now = time.perf_counter()
        if self.quiet or now - self.shown < self.every:
            return
        self.shown = now
        seconds = max(now - self.started, 1e-9)
        rate = self.chars / seconds
        left = (self.total_chars - self.chars) / rate if rate else 0
        print(
            f"tokenizing: {self.chars / 1e6:,.1f}/{self.total_chars / 1e6:,.1f} MB "
            f"({100 * self.chars / max(self.total_chars, 1):.0f}%)  {rate / 1e6:.1f} MB/s  "
            f"{self.docs / seconds:,.0f} documents/s  {left:.0f} s left",
            file=sys.stderr,
            flush=True,
        )


class Encoder:
    """Dataset.map's function: a batch of texts -> each text's ids followed by eos (the tokenizer is rebuilt from
    its JSON once per worker process)."""

    def __init__(self, tokenizer_json: str, eos_id: int):
        self.tokenizer_json, self.eos_id = tokenizer_json, eos_id
        self._tokenizer = None

    def __call__(self, batch: dict) -> dict:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer_json(self.tokenizer_json)
        encodings = self._tokenizer.encode_batch_fast(batch["text"], add_special_tokens=False)
        return {"ids": [e.ids + [self.eos_id] for e in encodings]}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tokenizer": None}


def _arrow_documents(documents: Callable[[], Iterable[str]], scratch: Path, source: str):
    """The documents as an Arrow table on disk, with each one's key and length: (Dataset, keys, chars)."""
    import datasets  # here, not at the top: it and pyarrow take ~1 s, kept out of `import selfsup.data`

    count = [0]

    def rows(make=documents):
        for text in make():
            count[0] += 1
            key = document_key(text)
            yield {"text": text, "key": key - (1 << 64) if key >= 1 << 63 else key, "chars": len(text)}  # int64 bits

    features = datasets.Features(
        {"text": datasets.Value("string"), "key": datasets.Value("int64"), "chars": datasets.Value("int64")}
    )
    try:
        dataset = datasets.Dataset.from_generator(
            rows, features=features, cache_dir=str(scratch), fingerprint=f"selfsup-{os.getpid()}-{time.time_ns()}"
        )
    except datasets.exceptions.DatasetGenerationError as err:
        cause = err
        while cause is not None and not isinstance(cause, DataError):
            cause = cause.__cause__ or cause.__context__
        if cause is not None:
            raise cause from None  # a document the sources refused: their one line, not datasets' wrapper
        raise
    except ValueError as err:
        if count[0] or "corresponds to no data" not in str(err):
            raise
        raise DataError(
            f"{source} gave no documents with text: check its settings (paths, split, text field)"
        ) from None
    table = dataset.data  # the Arrow table: whole columns at once
    keys = table.column("key").to_numpy().astype(np.int64, copy=False).view(np.uint64)
    return dataset, keys, table.column("chars").to_numpy().astype(np.int64, copy=False)


def _sample(dataset, indices: np.ndarray, chars: np.ndarray, limit: int) -> Iterator[str]:
    """The texts of dataset[indices] in order, until `limit` characters (at least one document)."""
    taken = np.cumsum(chars[indices])
    n = max(1, int(np.searchsorted(taken, limit, side="right")))
    part = dataset.select(indices[:n])
    for start in range(0, n, 1000):
        yield from part[start : start + 1000]["text"]


def _write_split(
    dataset,
    indices: np.ndarray,
    chars: np.ndarray,
    split: str,
    folder: Path,
    tokenizer_json: str,
    eos_id: int,
    dtype,
    num_proc: int,
    progress: Progress,
    shard_chars: int,
) -> tuple[list[dict], int, int]:
    """Tokenize dataset[indices] slice by slice into <split>-NNNNN.bin shards: (shard records, tokens, longest
    document in tokens)."""
    import datasets  # here, not at the top: it and pyarrow take ~1 s, kept out of `import selfsup.data`

    features = datasets.Features({"ids": datasets.Sequence(datasets.Value(np.dtype(dtype).name))})
    cumulative = np.cumsum(chars[indices])
    bounds = [0]
    while bounds[-1] < len(indices):  # slices of about shard_chars characters, at least one document each
        before = int(cumulative[bounds[-1] - 1]) if bounds[-1] else 0
        bounds.append(max(int(np.searchsorted(cumulative, before + shard_chars, side="right")), bounds[-1] + 1))
    shards, total, longest = [], 0, 0
    for start, end in zip(bounds, bounds[1:]):
        part, part_chars = dataset.select(indices[start:end]), int(chars[indices[start:end]].sum())
        workers = num_proc if num_proc > 1 and part_chars > PARALLEL_CHARS else None
        encoded = part.map(
            Encoder(tokenizer_json, eos_id),
            batched=True,
            batch_size=256,
            num_proc=workers,
            remove_columns=part.column_names,
            features=features,
            load_from_cache_file=False,
            new_fingerprint=f"{split}-{start}-{time.time_ns()}",
        )
        name = f"{split}-{len(shards):05d}.bin"
        count = 0
        with open(folder / name, "wb") as f:
            for batch in encoded.with_format("arrow").iter(batch_size=4096):
                column = batch.column("ids")
                if hasattr(column, "combine_chunks"):
                    column = column.combine_chunks()
                values = column.flatten().to_numpy(zero_copy_only=False).astype(dtype, copy=False)
                lengths = np.diff(column.offsets.to_numpy())
                longest = max(longest, int(lengths.max()) - 1 if len(lengths) else 0)
                f.write(values.astype(np.dtype(dtype).newbyteorder("<"), copy=False).tobytes())  # a full disk: ENOSPC
                count += values.size
        shards.append({"name": name, "tokens": count, "documents": end - start})
        total += count
        progress.add(part_chars, end - start)
    return shards, total, longest


def _splits(folder: Path, documents, val_documents, val_fraction: float, scratch: Path, source: str):
    """((Dataset, indices, characters) of the training split, the same of the validation split): the documents
    split by their keys, or the validation documents read the same way; the training keys saved (train_keys.npy)."""
    dataset, keys, chars = _arrow_documents(documents, scratch / "train", source)
    if val_documents is None:
        is_val = split_keys(keys, val_fraction)
        train_idx, val_idx = np.flatnonzero(~is_val), np.flatnonzero(is_val)
        val_set, val_chars = dataset, chars
    else:
        if len(keys) < 1:
            raise DataError(f"{source}: the training split has no documents with text")
        train_idx = np.arange(len(keys))
        val_set, val_keys, val_chars = _arrow_documents(val_documents, scratch / "val", f"{source} (validation)")
        val_idx = np.arange(len(val_keys))
        if not len(val_idx):
            raise DataError(
                f"{source}: the validation split has no documents with text: set data.val_split to "
                f"a split that has some, or null to hold out data.val_fraction of the training split"
            )
    np.save(folder / "train_keys.npy", np.sort(keys[train_idx]))
    return (dataset, train_idx, chars), (val_set, val_idx, val_chars)


def _write_meta(folder: Path, meta: dict, quiet: bool) -> None:
    """meta.json (written last: a cache without it is unfinished) with each file's size and checksums."""
    names = ["tokenizer.json", "train_keys.npy", *(s["name"] for split in meta["shards"].values() for s in split)]
    meta["files"] = {
        name: {
            "bytes": (folder / name).stat().st_size,
            "ends": end_checksum(folder / name),
            **({"chunks": chunk_checksums(folder / name)} if name.endswith(".bin") else {}),
        }
        for name in names
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    if not quiet:
        mb = sum(meta["characters"].values()) / 1e6
        shards = sum(len(split) for split in meta["shards"].values())
        seconds = meta["build_seconds"]
        print(
            f"prepared {mb:,.1f} MB, {sum(meta['documents'].values()):,} documents -> "
            f"{sum(meta['tokens'].values()):,} tokens ({shards} shards) in {seconds:.1f} s, "
            f"{mb / max(seconds, 1e-9):.1f} MB/s",
            file=sys.stderr,
            flush=True,
        )


def build(
    folder: Path,
    documents: Callable[[], Iterable[str]],
    *,
    val_documents: Callable[[], Iterable[str]] | None,
    val_fraction: float,
    make_tokenizer: Callable[[Iterator[str]], Tokenizer],
    n_sentinels: int,
    num_proc: int,
    source: str,
    identity: dict,
    quiet: bool = False,
    shard_chars: int = SHARD_CHARS,
) -> None:
    """Stream, split, train/prepare the tokenizer, tokenize into shards, write meta.json last."""
    started = time.perf_counter()
    scratch = folder / ".arrow"
    with quiet_datasets(), contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, scratch, ignore_errors=True)
        phases = {}
        (dataset, train_idx, chars), (val_set, val_idx, val_chars) = _splits(
            folder, documents, val_documents, val_fraction, scratch, source
        )
        phases["read"] = time.perf_counter() - started
        tokenizer = make_tokenizer(
            _sample(dataset, train_idx, chars, identity.get("tokenizer_sample_chars") or int(chars.sum()) + 1)
        )
        tokenizer.save(str(folder / "tokenizer.json"))
        phases["tokenizer"] = time.perf_counter() - started - phases["read"]
        vocab_size = tokenizer.get_vocab_size()
        eos_id = Vocab(size=vocab_size, n_sentinels=n_sentinels).eos_id
        dtype = np.uint16 if vocab_size <= 2**16 else np.uint32
        tokenizer_json = tokenizer.to_str()
        progress = Progress(int(chars[train_idx].sum() + val_chars[val_idx].sum()), quiet)
        shards, tokens, longest = {}, {}, {}
        for split, data, idx, lengths in (("train", dataset, train_idx, chars), ("val", val_set, val_idx, val_chars)):
            shards[split], tokens[split], longest[split] = _write_split(
                data, idx, lengths, split, folder, tokenizer_json, eos_id, dtype, num_proc, progress, shard_chars
            )
        if longest["train"] < 2:
            first = dataset[int(train_idx[0])]["text"]
            raise DataError(
                f"{source or 'the corpus'}: each of its {len(train_idx)} training documents is a single token "
                f"(such as {first[:30]!r}), so no objective has context to learn from: put several words in "
                f"each document (one document is a .txt file, a .jsonl line, a .parquet row or a data set row)"
            )
    seconds = time.perf_counter() - started
    meta = {
        "format_version": FORMAT_VERSION,
        "identity": identity,
        "source": source,
        "documents": {"train": len(train_idx), "val": len(val_idx)},
        "characters": {"train": int(chars[train_idx].sum()), "val": int(val_chars[val_idx].sum())},
        "tokens": tokens,
        "shards": shards,
        "vocab_size": vocab_size,
        "n_sentinels": n_sentinels,
        "dtype": np.dtype(dtype).name,
        "build_seconds": round(seconds, 3),
        "phase_seconds": {
            "read and split": round(phases["read"], 3),
            "tokenizer": round(phases["tokenizer"], 3),
            "tokenize and write": round(seconds - phases["read"] - phases["tokenizer"], 3),
        },
    }
    _write_meta(folder, meta, quiet)


def build_or_load_cache(
    documents: list[str],
    *,
    cache_dir: str | os.PathLike,
    val_fraction: float,
    vocab_size: int,
    n_sentinels: int,
    source: str = "",
    num_proc: int = 1,
    quiet: bool = True,
) -> TokenCache:
    """The cache of documents held in memory (keyed by their text): a BPE tokenizer trained on the training
    split, the tokens in shards. Corpus keys files by their stats instead, so it never reads them to find one."""
    check_vocab_size(vocab_size, n_sentinels)
    digest = hashlib.sha256()
    for doc in documents:
        data = doc.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))  # length prefix: document boundaries count
        digest.update(data)
    identity = {
        "source": "documents",
        "content": digest.hexdigest(),
        "val_fraction": val_fraction,
        "vocab_size": vocab_size,
        "n_sentinels": n_sentinels,
        "fim": list(FIM_SPECIALS),  # the special tokens' layout (selfsup.data.vocab)
    }
    return build_or_load(
        cache_key(identity),
        cache_dir,
        lambda folder: build(
            folder,
            lambda: documents,
            val_documents=None,
            val_fraction=val_fraction,
            make_tokenizer=lambda sample: train_tokenizer(sample, vocab_size, n_sentinels),
            n_sentinels=n_sentinels,
            num_proc=num_proc,
            source=source or "documents",
            identity=identity,
            quiet=quiet,
        ),
    )
