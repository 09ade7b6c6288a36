"""The token cache on disk: its layout, its key, the checks at every start, and loading it.

    <cache_dir>/<key[:16]>/
        tokenizer.json            the tokenizer (BPE trained on a sample of the training split, or a pretrained one)
        train-00000.bin ...       training documents' ids, each followed by eos (raw uint16 / uint32, little-endian)
        val-00000.bin ...         the same for validation
        train_keys.npy            the sorted 64-bit keys of the training documents (a probe must not hold one)
        meta.json                 counts, settings, each file's size and checksum of its first and last MiB,
                                  and each shard's checksum per MiB chunk (written last)

selfsup.data.prepare builds it (documents streamed through Hugging Face `datasets` into the shards); training
reads the shards by memory map (`ShardedTokens`).

The cache is found by a key of what identifies the corpus without reading it (file paths, sizes and
modification times; a data set's name, config, split and revision) and the tokenizer settings, so a warm
start reads no document (data.verify=full puts the hash of each local file's bytes in the key instead of its
modification time: a full read at every start). It is checked cheaply at every start (every file's size, the
checksums of its ends): a damaged cache is rebuilt, with a warning. The middle of a shard is checked as it is read: the first read of
each MiB chunk hashes it against meta.json, and a chunk that does not match stops the run with a DataError and
marks the cache (a `DAMAGED` file), so the next start rebuilds it. A cache folder is built under a temporary name and renamed into place,
so it is either complete or absent; when another process got there first, its copy is kept. A cache_dir that
cannot be written (when a build is needed) or that runs out of space while building is one DataError line,
with the temporary folder removed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from selfsup.data.sources import DataError, document_key, out_of_space
from selfsup.data.tokenizer import load_tokenizer

FORMAT_VERSION = 4  # 3: sharded .bin token files, train_keys.npy, end checksums; 4: chunk checksums
END_BYTES = 1 << 20  # a shard's checksum covers its first and last MiB: cheap at every start
CHUNK_BYTES = 1 << 20  # a shard's bytes are checked in chunks of this size, each the first time it is read
DAMAGED = "DAMAGED"  # written into a cache found damaged while reading: the next start rebuilds it
STALE_SECONDS = 24 * 3600  # a scratch folder untouched this long is a killed build's: swept by the next build


def cache_key(identity: dict) -> str:
    """sha256 of the corpus identity and settings (JSON, sorted keys)."""
    return hashlib.sha256(
        json.dumps({"format": FORMAT_VERSION, **identity}, sort_keys=True, default=str).encode()
    ).hexdigest()


class ShardedTokens:
    """The token files of a split as one flat, read-only array: len() and slices [a:b] (copied out of the
    memory maps). Pickles without its maps (a data-loader worker reopens them).

    With `chunks` (each file's blake2b per CHUNK_BYTES, from meta.json) every chunk a slice touches is hashed
    the first time it is read; one that does not match raises DataError and writes `DAMAGED` beside the files."""

    def __init__(self, paths: list[Path], dtype: str, chunks: list[list[str]] | None = None):
        self.paths, self.dtype = [str(p) for p in paths], np.dtype(dtype).newbyteorder("<")  # as written
        sizes = [os.path.getsize(p) // self.dtype.itemsize for p in self.paths]
        self.offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        self._maps: list[np.ndarray] | None = None
        self.chunks = chunks
        self.verified = [np.zeros(len(c), bool) for c in chunks] if chunks is not None else None

    @property
    def maps(self) -> list[np.ndarray]:
        if self._maps is None:
            self._maps = [
                np.memmap(p, dtype=self.dtype, mode="r") if os.path.getsize(p) else np.zeros(0, self.dtype)
                for p in self.paths
            ]
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
            return self[index : index + 1][0]
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
            a, b = max(start, lo) - lo, min(stop, hi) - lo
            if self.verified is not None:
                self._verify(i, a, b)
            pieces.append(self.maps[i][a:b])
        return pieces[0].copy() if len(pieces) == 1 else np.concatenate(pieces)

    def _verify(self, i: int, a: int, b: int) -> None:
        """Hash the chunks of file i that tokens [a, b) lie in and were not checked yet, against meta.json."""
        size = self.dtype.itemsize
        first, last = a * size // CHUNK_BYTES, ((b * size) - 1) // CHUNK_BYTES
        if self.verified[i][first : last + 1].all():
            return
        data = self.maps[i].view(np.uint8)
        for c in range(first, last + 1):
            if self.verified[i][c]:
                continue
            if chunk_digest(data[c * CHUNK_BYTES : (c + 1) * CHUNK_BYTES]) != self.chunks[i][c]:
                path = Path(self.paths[i])
                damage = (
                    f"{path.name} bytes {c * CHUNK_BYTES:,} to {min((c + 1) * CHUNK_BYTES, data.size):,} "
                    f"do not match their checksum (they were changed after the cache was built)"
                )
                try:
                    (path.parent / DAMAGED).write_text(damage + "\n")
                    fix = "the next start rebuilds the cache: run the command again"
                except OSError:  # a read-only cache
                    fix = f"delete {path.parent} (or have its owner do so), then run the command again"
                raise DataError(
                    f"token cache {path.parent} is damaged: {damage}; nothing was read from them, and "
                    f"{fix} (selfsup-train resume=RUN for a run this stopped)"
                )
            self.verified[i][c] = True

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


def chunk_digest(data) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def chunk_checksums(path: Path) -> list[str]:
    """blake2b of each CHUNK_BYTES of a file, in order."""
    out = []
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            out.append(chunk_digest(chunk))
    return out


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
    if (folder / DAMAGED).exists():
        return (folder / DAMAGED).read_text(errors="replace").strip() or "a run found it damaged"
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
    meta = json.loads((folder / "meta.json").read_text())
    shards = {split: [s["name"] for s in meta["shards"][split]] for split in ("train", "val")}

    def tokens(split: str) -> ShardedTokens:
        return ShardedTokens(
            [folder / name for name in shards[split]],
            meta["dtype"],
            [meta["files"][name]["chunks"] for name in shards[split]],
        )

    return TokenCache(
        path=folder,
        tokenizer=load_tokenizer(folder / "tokenizer.json"),
        train_tokens=tokens("train"),
        val_tokens=tokens("val"),
        train_keys=DocumentKeys(np.load(folder / "train_keys.npy", mmap_mode="r")),
        meta=meta,
        built=built,
    )


# ---------------------------------------------------------------------------------------------- building


def _no_space(cache_dir: Path, e: BaseException) -> DataError:
    return DataError(
        f"data.cache_dir={cache_dir} ran out of space while building the token cache "
        f"({out_of_space(e)}); nothing of it was kept: free space there or point data.cache_dir at a "
        f"folder with more room"
    )


def build_or_load(key: str, cache_dir: str | os.PathLike, build_into: Callable[[Path], None]) -> TokenCache:
    """Reuse `<cache_dir>/<key[:16]>/` when it is intact; otherwise build it (atomically) with build_into(folder).
    A cache_dir that cannot be written, or fills up while building, is a DataError (nothing of the build kept)."""
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
            raise DataError(
                f"token cache {target} is damaged ({damage}) and cannot be moved aside "
                f"({e.strerror}): delete that folder, then run again"
            ) from None
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
    try:
        scratch = Path(tempfile.mkdtemp(prefix=f".building-{key[:16]}-", dir=cache_dir))
    except OSError as e:
        if out_of_space(e):
            raise _no_space(cache_dir, e) from None
        raise DataError(
            f"data.cache_dir={cache_dir} cannot be written ({e.strerror}), and it holds no token cache "
            f"for these settings: pass a writable folder (data.cache_dir=<folder>)"
        ) from None
    try:
        scratch.chmod(0o755)  # mkdtemp makes it private; a cache may be shared
        try:
            build_into(scratch)
        except DataError:
            raise
        except Exception as e:  # noqa: BLE001 - datasets, Arrow and tokenizers each raise their own kind
            if out_of_space(e):
                raise _no_space(cache_dir, e) from None
            raise
        try:
            os.rename(scratch, target)  # atomic; fails when another process already put it there
        except OSError:
            if not (target / "meta.json").is_file():
                raise
            return load_cache(target)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # gone already after a successful rename
    return load_cache(target, built=True)
