"""Byte-level BPE tokenizer and the token cache it lives in.

The cache is keyed by content: sha256 over every document's text (in order), the split and
tokenizer settings and FORMAT_VERSION. `<cache_dir>/<key[:16]>/` holds

    tokenizer.json   the trained tokenizer (trained on the training split only)
    train.npy        training documents' ids, each followed by eos, concatenated (uint16 / uint32)
    val.npy          the same for validation
    meta.json        counts, settings and each file's size and blake2b checksum (written last)

A cache folder is built under a temporary name and renamed into place, so it is either complete
or absent; when another process got there first, its copy is kept and ours discarded. A cache whose
files no longer match their sizes and checksums (overwritten, truncated, deleted) is rebuilt, with a
warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from selfsup.data.sources import DataError, split_documents
from selfsup.data.vocab import WORD_START_MARKER, Vocab, special_tokens

FORMAT_VERSION = 2  # 2: meta.json records each file's size and checksum
N_BYTES = 256  # the byte-level alphabet every byte-level BPE vocabulary holds
_ENCODE_CHUNK = 4096  # documents per encode_batch call (bounds the memory held by Encoding objects)


def min_vocab_size(n_sentinels: int) -> int:
    return len(special_tokens(n_sentinels)) + N_BYTES


def check_vocab_size(vocab_size: int, n_sentinels: int) -> None:
    minimum = min_vocab_size(n_sentinels)
    if vocab_size < minimum:
        raise DataError(
            f"data.vocab_size={vocab_size} is too small: byte-level BPE needs at least {minimum} "
            f"({minimum - N_BYTES} special tokens + {N_BYTES} bytes): raise data.vocab_size or lower data.n_sentinels"
        )


def _finish(tokenizer: Tokenizer) -> Tokenizer:
    # Literal "<pad>", "</s>", ... in the text are text, not special tokens.
    tokenizer.encode_special_tokens = True
    return tokenizer


def train_tokenizer(documents: Sequence[str], vocab_size: int, n_sentinels: int) -> Tokenizer:
    """Train byte-level BPE on `documents`; the special tokens get ids 0..n_special-1 in order.

    The vocabulary can come out smaller than `vocab_size` when the text holds fewer merges seen
    at least twice. Decoding drops the one space the pre-tokenizer puts before a text, so
    decode(encode(x)) == x for text that does not begin with a space.
    """
    check_vocab_size(vocab_size, n_sentinels)
    specials = special_tokens(n_sentinels)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tokenizer.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tokenizer.train_from_iterator(documents, trainer, length=len(documents))
    ids = [tokenizer.token_to_id(token) for token in specials]
    assert ids == list(range(len(specials))), f"special tokens got ids {ids[:8]}…, expected 0..{len(specials) - 1}"
    return _finish(tokenizer)


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    return _finish(Tokenizer.from_file(str(path)))


def vocab_from_tokenizer(tokenizer: Tokenizer, n_sentinels: int) -> Vocab:
    """The Vocab of a tokenizer: its size, and word_start (tokens beginning with 'Ġ', and specials)."""
    size = tokenizer.get_vocab_size()
    n_special = len(special_tokens(n_sentinels))
    word_start = torch.zeros(size, dtype=torch.bool)
    for token, i in tokenizer.get_vocab().items():
        if i < size:
            word_start[i] = token.startswith(WORD_START_MARKER)
    word_start[:n_special] = True
    return Vocab(size=size, n_sentinels=n_sentinels, word_start=word_start)


def encode_documents(tokenizer: Tokenizer, documents: Sequence[str], eos_id: int) -> np.ndarray:
    """All documents' ids, each followed by eos, in one flat array (uint16 when the ids fit)."""
    dtype = np.uint16 if tokenizer.get_vocab_size() <= 2**16 else np.uint32
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)  # no offsets: faster
    parts = []
    for start in range(0, len(documents), _ENCODE_CHUNK):
        for encoding in encode(list(documents[start : start + _ENCODE_CHUNK]), add_special_tokens=False):
            parts.append(np.asarray(encoding.ids, dtype=dtype))
            parts.append(np.asarray([eos_id], dtype=dtype))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def longest_document(tokens: np.ndarray, eos_id: int) -> int:
    """The number of tokens in the longest document of encode_documents' array (eos not counted)."""
    ends = np.flatnonzero(np.asarray(tokens) == eos_id)
    return int(np.diff(ends, prepend=-1).max()) - 1 if ends.size else 0


def cache_key(documents: Sequence[str], val_fraction: float, vocab_size: int, n_sentinels: int) -> str:
    digest = hashlib.sha256()
    settings = {
        "format": FORMAT_VERSION,
        "val_fraction": val_fraction,
        "vocab_size": vocab_size,
        "n_sentinels": n_sentinels,
    }
    digest.update(json.dumps(settings, sort_keys=True).encode())
    for doc in documents:
        data = doc.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))  # length prefix: document boundaries count
        digest.update(data)
    return digest.hexdigest()


@dataclass(frozen=True)
class TokenCache:
    path: Path
    tokenizer: Tokenizer
    train_tokens: np.ndarray  # read-only memmaps
    val_tokens: np.ndarray
    meta: dict
    built: bool  # False when an existing cache was reused


CACHE_FILES = ("tokenizer.json", "train.npy", "val.npy")


def file_record(path: Path) -> dict:
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "blake2b").hexdigest()
    return {"bytes": path.stat().st_size, "blake2b": digest}


def cache_damage(folder: Path) -> str | None:
    """None when every file of the cache matches its size and checksum in meta.json, else what is wrong."""
    try:
        recorded = json.loads((folder / "meta.json").read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return "meta.json is unreadable or records no files"
    for name in CACHE_FILES:
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != recorded.get(name, {}).get("bytes"):
            return f"{name} has {path.stat().st_size} bytes, the manifest says {recorded.get(name, {}).get('bytes')}"
        if file_record(path)["blake2b"] != recorded[name].get("blake2b"):
            return f"{name} does not match its checksum (its bytes were changed)"
    return None


def _load(path: Path, built: bool) -> TokenCache:
    return TokenCache(
        path=path,
        tokenizer=load_tokenizer(path / "tokenizer.json"),
        train_tokens=np.load(path / "train.npy", mmap_mode="r"),
        val_tokens=np.load(path / "val.npy", mmap_mode="r"),
        meta=json.loads((path / "meta.json").read_text()),
        built=built,
    )


def _build(
    folder: Path,
    documents: Sequence[str],
    val_fraction: float,
    vocab_size: int,
    n_sentinels: int,
    key: str,
    source: str,
) -> None:
    train_docs, val_docs = split_documents(documents, val_fraction)
    started = time.perf_counter()
    tokenizer = train_tokenizer(train_docs, vocab_size, n_sentinels)
    tokenizer.save(str(folder / "tokenizer.json"))
    eos_id = Vocab(size=tokenizer.get_vocab_size(), n_sentinels=n_sentinels).eos_id
    arrays = {
        "train": encode_documents(tokenizer, train_docs, eos_id),
        "val": encode_documents(tokenizer, val_docs, eos_id),
    }
    if longest_document(arrays["train"], eos_id) < 2:
        raise DataError(
            f"{source or 'the corpus'}: each of its {len(train_docs)} training documents is a single token "
            f"(such as {train_docs[0][:30]!r}), so no objective has context to learn from: put several words in "
            f"each document (one document is a .txt file, a .jsonl line, a .parquet row or a data set row)"
        )
    for split, array in arrays.items():
        np.save(folder / f"{split}.npy", array)
    meta = {
        "format_version": FORMAT_VERSION,
        "key": key,
        "source": source,
        "documents": {"train": len(train_docs), "val": len(val_docs)},
        "characters": {"train": sum(map(len, train_docs)), "val": sum(map(len, val_docs))},
        "tokens": {split: int(array.size) for split, array in arrays.items()},
        "vocab_size": tokenizer.get_vocab_size(),
        "requested_vocab_size": vocab_size,
        "n_sentinels": n_sentinels,
        "val_fraction": val_fraction,
        "dtype": str(arrays["train"].dtype),
        "build_seconds": round(time.perf_counter() - started, 3),
        "files": {name: file_record(folder / name) for name in CACHE_FILES},
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def build_or_load_cache(
    documents: Sequence[str],
    *,
    cache_dir: str | os.PathLike,
    val_fraction: float,
    vocab_size: int,
    n_sentinels: int,
    source: str = "",
) -> TokenCache:
    """Reuse `<cache_dir>/<key[:16]>/` when it exists; otherwise split, train, encode and store."""
    check_vocab_size(vocab_size, n_sentinels)
    key = cache_key(documents, val_fraction, vocab_size, n_sentinels)
    cache_dir = Path(cache_dir).expanduser()
    target = cache_dir / key[:16]
    if (target / "meta.json").is_file():
        damage = cache_damage(target)
        if damage is None:
            return _load(target, built=False)
        logging.getLogger("selfsup").warning(f"token cache {target} is damaged ({damage}): rebuilding it")
        aside = target.with_name(f".damaged-{target.name}-{os.getpid()}")
        try:
            os.rename(target, aside)  # atomic: a process reading it keeps its open files
            shutil.rmtree(aside, ignore_errors=True)
        except OSError as e:
            raise DataError(f"token cache {target} is damaged ({damage}) and cannot be moved aside "
                            f"({e.strerror}): delete that folder, then run again") from None
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"data.cache_dir: cannot create {cache_dir} ({e.strerror}): pass a writable folder") from None
    scratch = Path(tempfile.mkdtemp(prefix=f".building-{key[:16]}-", dir=cache_dir))
    try:
        scratch.chmod(0o755)  # mkdtemp makes it private; a cache may be shared
        _build(scratch, documents, val_fraction, vocab_size, n_sentinels, key, source)
        try:
            os.rename(scratch, target)  # atomic; fails when another process already put it there
        except OSError:
            if not (target / "meta.json").is_file():
                raise
            return _load(target, built=False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # gone already after a successful rename
    return _load(target, built=True)
