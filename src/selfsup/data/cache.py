"""The token cache: documents streamed through Hugging Face `datasets` into sharded token files.

    <cache_dir>/<key[:16]>/
        tokenizer.json            the tokenizer (BPE trained on a sample of the training split, or a pretrained one)
        train-00000.bin ...       training documents' ids, each followed by eos (raw uint16 / uint32, little-endian)
        val-00000.bin ...         the same for validation
        train_keys.npy            the sorted 64-bit keys of the training documents (a probe must not hold one)
        meta.json                 counts, settings and each file's size and checksum of its first and last MiB
                                  (written last)

Building streams the documents into an Arrow table on disk (`datasets.Dataset.from_generator`: written in
batches, never the whole corpus in memory), splits it by document keys, trains the tokenizer on a bounded
sample of the training split, then tokenizes slices of about `shard_chars` characters with `Dataset.map`
in `num_proc` worker processes, each slice becoming one shard; the Arrow scratch is deleted at the end.
Training reads the shards by memory map (`ShardedTokens`).

The cache is found by a key of what identifies the corpus without reading it (file paths, sizes and
modification times; a data set's name, config, split and revision) and the tokenizer settings, so a warm
start reads no document. It is checked cheaply (every file's size, the checksums of its ends): a damaged
cache is rebuilt, with a warning. A cache folder is built under a temporary name and renamed into place,
so it is either complete or absent; when another process got there first, its copy is kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from selfsup.data.sources import DataError, document_key, split_keys

FORMAT_VERSION = 3  # 3: sharded .bin token files, train_keys.npy, end checksums
SHARD_CHARS = 64_000_000  # default characters per shard (data.shard_chars): one Dataset.map call each
END_BYTES = 1 << 20  # a shard's checksum covers its first and last MiB: cheap at every start
STALE_SECONDS = 24 * 3600  # a scratch folder untouched this long is a killed build's: swept by the next build
PARALLEL_CHARS = 4_000_000  # a slice this large is tokenized in num_proc processes (starting them costs ~1 s)


def cache_key(identity: dict) -> str:
    """sha256 of the corpus identity and settings (JSON, sorted keys)."""
    return hashlib.sha256(json.dumps({"format": FORMAT_VERSION, **identity}, sort_keys=True,
                                     default=str).encode()).hexdigest()


class ShardedTokens:
    """The token files of a split as one flat, read-only array: len() and slices [a:b] (copied out of the
    memory maps). Pickles without its maps (a data-loader worker reopens them)."""

    def __init__(self, paths: list[Path], dtype: str):
        self.paths, self.dtype = [str(p) for p in paths], np.dtype(dtype).newbyteorder("<")  # as written
        sizes = [os.path.getsize(p) // self.dtype.itemsize for p in self.paths]
        self.offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        self._maps: list[np.ndarray] | None = None

    @property
    def maps(self) -> list[np.ndarray]:
        if self._maps is None:
            self._maps = [np.memmap(p, dtype=self.dtype, mode="r") if os.path.getsize(p) else
                          np.zeros(0, self.dtype) for p in self.paths]
        return self._maps

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def size(self) -> int:
        return len(self)

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, (int, np.integer)):
            index = int(key) + len(self) if key < 0 else int(key)
            if not 0 <= index < len(self):
                raise IndexError(f"token {key} out of range for {len(self)} tokens")
            return self[index:index + 1][0]
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("ShardedTokens takes an index or a contiguous slice [a:b]")
        start, stop, _ = key.indices(len(self))
        if stop <= start:
            return np.zeros(0, self.dtype)
        first = int(np.searchsorted(self.offsets, start, side="right")) - 1
        pieces = []
        for i in range(first, len(self.paths)):
            lo, hi = self.offsets[i], self.offsets[i + 1]
            if lo >= stop:
                break
            pieces.append(self.maps[i][max(start, lo) - lo: min(stop, hi) - lo])
        return pieces[0].copy() if len(pieces) == 1 else np.concatenate(pieces)

    def __array__(self, dtype=None, copy=None):
        out = self[:]
        return out if dtype is None else out.astype(dtype)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_maps": None}


class DocumentKeys:
    """The sorted 64-bit keys of a split's documents: `text in keys` without holding the texts."""

    def __init__(self, keys: np.ndarray):
        self.keys = keys

    def __len__(self) -> int:
        return len(self.keys)

    def __contains__(self, text: str) -> bool:
        key = np.uint64(document_key(text))
        i = int(np.searchsorted(self.keys, key))
        return i < len(self.keys) and self.keys[i] == key


@dataclass(frozen=True)
class TokenCache:
    path: Path
    tokenizer: Tokenizer
    train_tokens: ShardedTokens
    val_tokens: ShardedTokens
    train_keys: DocumentKeys
    meta: dict
    built: bool  # False when an existing cache was reused


def end_checksum(path: Path) -> str:
    """blake2b of a file's size, first and last MiB."""
    digest = hashlib.blake2b(str(path.stat().st_size).encode())
    with open(path, "rb") as f:
        digest.update(f.read(END_BYTES))
        if path.stat().st_size > END_BYTES:
            f.seek(max(END_BYTES, path.stat().st_size - END_BYTES))
            digest.update(f.read(END_BYTES))
    return digest.hexdigest()


def cache_damage(folder: Path) -> str | None:
    """None when every file of the cache has the size and end checksum meta.json records, else what is wrong."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
        recorded = meta["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return "meta.json is unreadable or records no files"
    if meta.get("format_version") != FORMAT_VERSION:
        return f"it was written by another version of selfsup (format {meta.get('format_version')})"
    for name, record in recorded.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != record.get("bytes"):
            return f"{name} has {path.stat().st_size} bytes, the manifest says {record.get('bytes')}"
        if end_checksum(path) != record.get("ends"):
            return f"{name} does not match its checksum (its bytes were changed)"
    return None


def load_cache(folder: Path, built: bool = False) -> TokenCache:
    from selfsup.data.tokenizer import load_tokenizer
    meta = json.loads((folder / "meta.json").read_text())
    shards = {split: [folder / s["name"] for s in meta["shards"][split]] for split in ("train", "val")}
    return TokenCache(path=folder, tokenizer=load_tokenizer(folder / "tokenizer.json"),
                      train_tokens=ShardedTokens(shards["train"], meta["dtype"]),
                      val_tokens=ShardedTokens(shards["val"], meta["dtype"]),
                      train_keys=DocumentKeys(np.load(folder / "train_keys.npy", mmap_mode="r")),
                      meta=meta, built=built)


# ---------------------------------------------------------------------------------------------- building
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
        print(f"tokenizing: {self.chars / 1e6:,.1f}/{self.total_chars / 1e6:,.1f} MB "
              f"({100 * self.chars / max(self.total_chars, 1):.0f}%)  {rate / 1e6:.1f} MB/s  "
              f"{self.docs / seconds:,.0f} documents/s  {left:.0f} s left", file=sys.stderr, flush=True)


class Encoder:
    """Dataset.map's function: a batch of texts -> each text's ids followed by eos (the tokenizer is rebuilt from
    its JSON once per worker process)."""

    def __init__(self, tokenizer_json: str, eos_id: int):
        self.tokenizer_json, self.eos_id = tokenizer_json, eos_id
        self._tokenizer = None

    def __call__(self, batch: dict) -> dict:
        if self._tokenizer is None:
            from selfsup.data.tokenizer import load_tokenizer_json
            self._tokenizer = load_tokenizer_json(self.tokenizer_json)
        encodings = self._tokenizer.encode_batch_fast(batch["text"], add_special_tokens=False)
        return {"ids": [e.ids + [self.eos_id] for e in encodings]}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_tokenizer": None}


def _arrow_documents(documents: Callable[[], Iterable[str]], scratch: Path, source: str):
    """The documents as an Arrow table on disk, with each one's key and length: (Dataset, keys, chars)."""
    import datasets
    count = [0]

    def rows(make=documents):
        for text in make():
            count[0] += 1
            key = document_key(text)
            yield {"text": text, "key": key - (1 << 64) if key >= 1 << 63 else key, "chars": len(text)}  # int64 bits

    features = datasets.Features({"text": datasets.Value("string"), "key": datasets.Value("int64"),
                                  "chars": datasets.Value("int64")})
    try:
        dataset = datasets.Dataset.from_generator(rows, features=features, cache_dir=str(scratch),
                                                  fingerprint=f"selfsup-{os.getpid()}-{time.time_ns()}")
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
        raise DataError(f"{source} gave no documents with text: check its settings (paths, split, text field)") from None
    table = dataset.data  # the Arrow table: whole columns at once
    keys = table.column("key").to_numpy().astype(np.int64, copy=False).view(np.uint64)
    return dataset, keys, table.column("chars").to_numpy().astype(np.int64, copy=False)


def _sample(dataset, indices: np.ndarray, chars: np.ndarray, limit: int) -> Iterator[str]:
    """The texts of dataset[indices] in order, until `limit` characters (at least one document)."""
    taken = np.cumsum(chars[indices])
    n = max(1, int(np.searchsorted(taken, limit, side="right")))
    part = dataset.select(indices[:n])
    for start in range(0, n, 1000):
        yield from part[start:start + 1000]["text"]


def _write_split(dataset, indices: np.ndarray, chars: np.ndarray, split: str, folder: Path, tokenizer_json: str,
                 eos_id: int, dtype, num_proc: int, progress: Progress, shard_chars: int) -> tuple[list[dict], int, int]:
    """Tokenize dataset[indices] slice by slice into <split>-NNNNN.bin shards: (shard records, tokens, longest
    document in tokens)."""
    import datasets
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
        encoded = part.map(Encoder(tokenizer_json, eos_id), batched=True, batch_size=256, num_proc=workers,
                           remove_columns=part.column_names, features=features, load_from_cache_file=False,
                           new_fingerprint=f"{split}-{start}-{time.time_ns()}")
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
                values.astype(np.dtype(dtype).newbyteorder("<"), copy=False).tofile(f)
                count += values.size
        shards.append({"name": name, "tokens": count, "documents": end - start})
        total += count
        progress.add(part_chars, end - start)
    return shards, total, longest


def build(folder: Path, documents: Callable[[], Iterable[str]], *, val_documents: Callable[[], Iterable[str]] | None,
          val_fraction: float, make_tokenizer: Callable[[Iterator[str]], Tokenizer], n_sentinels: int,
          num_proc: int, source: str, identity: dict, quiet: bool = False, shard_chars: int = SHARD_CHARS) -> None:
    """Stream, split, train/prepare the tokenizer, tokenize into shards, write meta.json last."""
    import datasets

    from selfsup.data.vocab import Vocab
    started = time.perf_counter()
    scratch = folder / ".arrow"
    bars = datasets.utils.logging.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(datasets.logging.ERROR)
    try:
        phases = {}
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
                raise DataError(f"{source}: the validation split has no documents with text: set data.val_split to "
                                f"a split that has some, or null to hold out data.val_fraction of the training split")
        np.save(folder / "train_keys.npy", np.sort(keys[train_idx]))
        phases["read"] = time.perf_counter() - started
        tokenizer = make_tokenizer(_sample(dataset, train_idx, chars, identity.get("tokenizer_sample_chars")
                                           or int(chars.sum()) + 1))
        tokenizer.save(str(folder / "tokenizer.json"))
        phases["tokenizer"] = time.perf_counter() - started - phases["read"]
        vocab_size = tokenizer.get_vocab_size()
        eos_id = Vocab(size=vocab_size, n_sentinels=n_sentinels).eos_id
        dtype = np.uint16 if vocab_size <= 2**16 else np.uint32
        tokenizer_json = tokenizer.to_str()
        progress = Progress(int(chars[train_idx].sum() + val_chars[val_idx].sum()), quiet)
        shards, tokens, longest = {}, {}, 0
        for split, data, idx, lengths in (("train", dataset, train_idx, chars), ("val", val_set, val_idx, val_chars)):
            shards[split], tokens[split], longest_here = _write_split(data, idx, lengths, split, folder,
                                                                      tokenizer_json, eos_id, dtype, num_proc, progress,
                                                                      shard_chars)
            if split == "train":
                longest = longest_here
        if longest < 2:
            first = dataset[int(train_idx[0])]["text"]
            raise DataError(
                f"{source or 'the corpus'}: each of its {len(train_idx)} training documents is a single token "
                f"(such as {first[:30]!r}), so no objective has context to learn from: put several words in "
                f"each document (one document is a .txt file, a .jsonl line, a .parquet row or a data set row)"
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        datasets.logging.set_verbosity(verbosity)
        if bars:
            datasets.enable_progress_bars()
    seconds = time.perf_counter() - started
    names = ["tokenizer.json", "train_keys.npy", *(s["name"] for split in shards.values() for s in split)]
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
        "phase_seconds": {"read and split": round(phases["read"], 3), "tokenizer": round(phases["tokenizer"], 3),
                          "tokenize and write": round(seconds - phases["read"] - phases["tokenizer"], 3)},
        "files": {name: {"bytes": (folder / name).stat().st_size, "ends": end_checksum(folder / name)}
                  for name in names},
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    if not quiet:
        mb = (meta["characters"]["train"] + meta["characters"]["val"]) / 1e6
        print(f"prepared {mb:,.1f} MB, {len(train_idx) + len(val_idx):,} documents -> "
              f"{tokens['train'] + tokens['val']:,} tokens ({len(shards['train']) + len(shards['val'])} shards) in "
              f"{seconds:.1f} s, {mb / max(seconds, 1e-9):.1f} MB/s",
              file=sys.stderr, flush=True)


def build_or_load(key: str, cache_dir: str | os.PathLike, build_into: Callable[[Path], None]) -> TokenCache:
    """Reuse `<cache_dir>/<key[:16]>/` when it is intact; otherwise build it (atomically) with build_into(folder)."""
    cache_dir = Path(cache_dir).expanduser()
    target = cache_dir / key[:16]
    if target.exists():
        damage = cache_damage(target)  # a folder without meta.json counts as damaged too
        if damage is None:
            return load_cache(target)
        logging.getLogger("selfsup").warning(f"token cache {target} is damaged ({damage}): rebuilding it")
        aside = target.with_name(f".damaged-{target.name}-{os.getpid()}")
        try:
            os.rename(target, aside)  # atomic: a process reading it keeps its open files
            shutil.rmtree(aside, ignore_errors=True)
        except FileNotFoundError:
            pass  # another process moved it aside first
        except OSError as e:
            raise DataError(f"token cache {target} is damaged ({damage}) and cannot be moved aside "
                            f"({e.strerror}): delete that folder, then run again") from None
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"data.cache_dir: cannot create {cache_dir} ({e.strerror}): pass a writable folder") from None
    for left in [*cache_dir.glob(".building-*"), *cache_dir.glob(".damaged-*")]:  # of builds killed a day ago
        try:
            if time.time() - left.stat().st_mtime > STALE_SECONDS:
                shutil.rmtree(left, ignore_errors=True)
        except OSError:
            pass
    scratch = Path(tempfile.mkdtemp(prefix=f".building-{key[:16]}-", dir=cache_dir))
    try:
        scratch.chmod(0o755)  # mkdtemp makes it private; a cache may be shared
        build_into(scratch)
        try:
            os.rename(scratch, target)  # atomic; fails when another process already put it there
        except OSError:
            if not (target / "meta.json").is_file():
                raise
            return load_cache(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # gone already after a successful rename
    return load_cache(target, built=True)



def build_or_load_cache(documents: list[str], *, cache_dir: str | os.PathLike, val_fraction: float, vocab_size: int,
                        n_sentinels: int, source: str = "", num_proc: int = 1, quiet: bool = True) -> TokenCache:
    """The cache of documents held in memory (keyed by their text): a BPE tokenizer trained on the training
    split, the tokens in shards. Corpus keys files by their stats instead, so it never reads them to find one."""
    from selfsup.data.tokenizer import check_vocab_size, train_tokenizer
    check_vocab_size(vocab_size, n_sentinels)
    digest = hashlib.sha256()
    for doc in documents:
        data = doc.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))  # length prefix: document boundaries count
        digest.update(data)
    identity = {"source": "documents", "content": digest.hexdigest(), "val_fraction": val_fraction,
                "vocab_size": vocab_size, "n_sentinels": n_sentinels}
    return build_or_load(cache_key(identity), cache_dir, lambda folder: build(
        folder, lambda: documents, val_documents=None, val_fraction=val_fraction,
        make_tokenizer=lambda sample: train_tokenizer(sample, vocab_size, n_sentinels), n_sentinels=n_sentinels,
        num_proc=num_proc, source=source or "documents", identity=identity, quiet=quiet))
