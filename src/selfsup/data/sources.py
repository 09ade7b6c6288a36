"""Text sources: each turns settings into a list of documents (str), then one deterministic split.

A document is the unit that is never split across train / validation. Three sources:

- `builtin_documents()` (in builtin.py): English prose that ships with Python (pydoc topics + stdlib docstrings).
- `text_file_documents(paths, text_field)`: .txt / .jsonl / .parquet files or folders.
- `iter_hf_documents(name, ...)` (in hf_dataset.py): a data set loaded with `datasets.load_dataset`.
"""

from __future__ import annotations

import codecs
import errno
import glob
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from selfsup.errors import UserError


class DataError(UserError, ValueError):
    """Bad data input; the message is one line saying what is wrong and how to fix it."""


SUPPORTED_SUFFIXES = (".txt", ".jsonl", ".parquet")
MAX_TXT_DOCUMENT_CHARS = 64_000  # .txt files longer than this are cut (at blank lines) into documents
_VAL_BUCKETS = 10_000


def one_line(message: object, limit: int = 200) -> str:
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def drop_empty(documents: Iterable[str | None]) -> list[str]:
    """Documents that are not None, empty or whitespace only."""
    return [d for d in documents if d is not None and d.strip()]


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def out_of_space(e: BaseException) -> str | None:
    """The error's text when it, or an error it was raised from, is a full disk (or quota), else None. Libraries
    wrap it (datasets in a DatasetGenerationError) or raise it with the system's text only (tokenizers, Arrow)."""
    texts = [os.strerror(code) for code in _NO_SPACE]
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _NO_SPACE:
            return os.strerror(e.errno)
        found = [text for text in texts if text in str(e)]
        if found:
            return found[0]
        e = e.__cause__ or e.__context__
    return None


# --------------------------------------------------------------------------------------------
# text_files: .txt / .jsonl / .parquet
# --------------------------------------------------------------------------------------------


_warned: set[str] = set()


def warn_once(message: str) -> None:
    """A warning line on stderr, once per process (a run reads its data, tasks and pairs in its check and again
    to run)."""
    if message not in _warned:
        _warned.add(message)
        print(f"warning: {message}", file=sys.stderr)


def _expand_paths(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths or ())
    if not paths:
        raise DataError("data.paths is empty: pass one or more .txt/.jsonl/.parquet files or folders")
    files: list[Path] = []
    for given in paths:
        path = Path(given).expanduser()
        if not path.exists():
            raise DataError(f"data.paths: {path} does not exist: pass existing .txt/.jsonl/.parquet files or folders")
        if path.is_dir():
            found = sorted(
                f
                for f in path.rglob("*")
                if f.suffix.lower() in SUPPORTED_SUFFIXES
                and f.is_file()
                and not any(part.startswith(".") for part in f.relative_to(path).parts)
            )
            if not found:
                raise DataError(
                    f"data.paths: folder {path} holds no .txt, .jsonl or .parquet files: add some or pass other paths"
                )
            empty = [f for f in found if f.stat().st_size == 0]  # (a file named on its own is refused when empty)
            if len(empty) == len(found):
                raise DataError(f"data.paths: every file in folder {path} is empty: add text or pass other paths")
            if empty:
                warn_once(f"data.paths: {len(empty)} empty files in folder {path} skipped (e.g. {empty[0].name})")
            files += [f for f in found if f not in empty]
        elif not path.is_file():
            raise DataError(
                f"data.paths: {path} is not a regular file (a FIFO, socket or device, which reading "
                f"could wait on for ever): pass .txt/.jsonl/.parquet files or folders"
            )
        elif path.suffix.lower() not in SUPPORTED_SUFFIXES:
            raise DataError(
                f"data.paths: {path} has unsupported extension '{path.suffix or '(none)'}': "
                f"use .txt, .jsonl or .parquet"
            )
        else:
            files.append(path)
    return list(dict.fromkeys(files))  # a file named twice is read once


def split_long_text(text: str, limit: int = MAX_TXT_DOCUMENT_CHARS) -> list[str]:
    """Cut text into pieces of at most `limit` characters, preferably at blank lines.

    Falls back to line ends, then spaces, then a hard cut. The pieces concatenate back to `text`.
    """
    pieces, start = [], 0
    while len(text) - start > limit:
        cut = start + _cut(text[start : start + limit], limit)
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def _cut(text: str, limit: int) -> int:
    """Where split_long_text cuts a text longer than limit: after the last blank line, line end or space of its
    first `limit` characters, else at limit."""
    window = text[:limit]
    for separator in ("\n\n", "\n", " "):
        i = window.rfind(separator)
        if i > 0:
            return i + len(separator)
    return limit


def _txt_documents(path: Path, limit: int = MAX_TXT_DOCUMENT_CHARS, block_bytes: int = 1 << 20):
    """The documents of a .txt file, read a MiB at a time: the pieces split_long_text cuts the whole text into
    (empty ones dropped), without holding the file in memory."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    buffer, offset, found = "", 0, False
    with open(path, "rb") as f:
        while True:
            block = f.read(block_bytes)
            if b"\x00" in block:
                raise DataError(f"{path} looks binary (it holds NUL bytes), not text: remove it from data.paths")
            pending = len(decoder.getstate()[0])
            try:
                buffer += decoder.decode(block, final=not block)
            except UnicodeDecodeError as e:
                raise DataError(
                    f"{path} is not UTF-8 text (invalid byte at offset {offset - pending + e.start}): "
                    f"convert it to UTF-8 or remove it from data.paths"
                ) from None
            offset += len(block)
            while len(buffer) > limit:
                cut = _cut(buffer, limit)
                piece, buffer = buffer[:cut], buffer[cut:]
                if piece.strip():
                    found = True
                    yield piece
            if not block:
                break
    if buffer.strip():
        yield buffer
    elif not found:
        raise DataError(f"{path} is empty: add text to it or remove it from data.paths")


def text_lines(path: Path, fix: str, error: type[DataError] = DataError) -> Iterator[tuple[int, str]]:
    """(line number, line with its end) of a text file, read a line at a time: NUL bytes and invalid UTF-8 are
    refused in one line (an `error`) ending in `fix`, what to do about the file."""
    offset = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if b"\x00" in raw:
                raise error(f"{path} looks binary (it holds NUL bytes), not text: {fix}")
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise error(
                    f"{path} is not UTF-8 text (invalid byte at offset {offset + e.start}): convert it to UTF-8 or {fix}"
                ) from None
            offset += len(raw)
            yield number, line


def jsonl_objects(path: Path, fix: str, needs: str, error: type[DataError] = DataError) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a .jsonl file (text_lines); a line that is not a JSON
    object is refused in one line saying each must be an object with `needs`."""
    for number, line in text_lines(path, fix, error):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise error(
                f"{path}:{number}: not valid JSON ({e.msg}): each line of a .jsonl file must be one JSON object"
            ) from None
        if not isinstance(record, dict):
            raise error(
                f"{path}:{number}: a JSON {type(record).__name__}, not an object: each line must be an object "
                f"with {needs}"
            )
        yield number, record


def parquet_file(path: Path, fix: str, error: type[DataError] = DataError):
    """pyarrow's ParquetFile of `path`, or one line (an `error`) ending in `fix`."""
    try:  # pyarrow is imported here, not at the top: ~0.2 s, kept out of `import selfsup.data`
        import pyarrow.parquet as pq
    except ImportError:
        raise error(f"reading {path} needs pyarrow: pip install pyarrow") from None
    try:
        return pq.ParquetFile(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds
        raise error(f"{path} is not a readable parquet file ({one_line(e)}): {fix}") from None


def _jsonl_documents(path: Path, text_field: str):
    """The documents of a .jsonl file, one line at a time."""
    found = False
    for number, record in jsonl_objects(path, "remove it from data.paths", f"a '{text_field}' field"):
        if text_field not in record:
            fields = ", ".join(map(str, list(record)[:10])) or "none"
            raise DataError(
                f"{path}:{number}: no field '{text_field}' (fields: {fields}): "
                f"set data.text_field to the field holding the text"
            )
        value = record[text_field]
        if value is not None and not isinstance(value, str):
            raise DataError(
                f"{path}:{number}: field '{text_field}' is a JSON {type(value).__name__}, not a string: "
                f"set data.text_field to the field holding the text"
            )
        if value is not None and value.strip():
            found = True
            yield value
    if not found:
        raise DataError(
            f"{path} has no text (no non-empty '{text_field}' values): add records or remove it from data.paths"
        )


def _parquet_documents(path: Path, text_field: str):
    file = parquet_file(path, "fix or remove it")  # (without pyarrow: its one line, before the import below)
    import pyarrow as pa

    schema = file.schema_arrow
    if text_field not in schema.names:
        columns = ", ".join(schema.names[:10]) or "none"
        raise DataError(
            f"{path}: no column '{text_field}' (columns: {columns}): set data.text_field to the column holding the text"
        )
    kind = schema.field(text_field).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or str(kind) == "string_view"):
        raise DataError(
            f"{path}: column '{text_field}' holds {kind}, not strings: "
            f"set data.text_field to the column holding the text"
        )
    found = False
    for batch in file.iter_batches(columns=[text_field], batch_size=4096):
        for value in drop_empty(batch.column(0).to_pylist()):
            found = True
            yield value
    if not found:
        raise DataError(
            f"{path} has no text (no non-empty '{text_field}' values): add rows or remove it from data.paths"
        )


def iter_text_file_documents(paths: str | os.PathLike | Sequence[str | os.PathLike], text_field: str = "text"):
    """Documents from files and folders (searched recursively, in sorted order; hidden ones skipped), one file
    at a time and .jsonl / .parquet files in pieces, so the corpus is never in memory as a whole.

    .txt: one document per file, cut at blank lines into pieces of <= 64K characters when longer.
    .jsonl: one document per line, the text in `text_field`. .parquet: one per row of `text_field`.
    """
    for path in _expand_paths(paths):
        suffix = path.suffix.lower()
        if suffix == ".txt":
            yield from _txt_documents(path)
        elif suffix == ".jsonl":
            yield from _jsonl_documents(path, text_field)
        else:
            yield from _parquet_documents(path, text_field)


def text_file_documents(paths: str | os.PathLike | Sequence[str | os.PathLike], text_field: str = "text") -> list[str]:
    """The documents of iter_text_file_documents as a list."""
    return list(iter_text_file_documents(paths, text_field))


def file_digest(path: str | os.PathLike) -> str:
    """blake2b of a file's whole content, read a MiB at a time."""
    digest = hashlib.blake2b(digest_size=16)
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
    except OSError as e:
        raise DataError(
            f"data.verify=full: cannot read {path} to hash it ({e.strerror}): make it readable or "
            f"remove it from the data settings"
        ) from None
    return digest.hexdigest()


def _stat(path: Path, content: bool = False) -> list:
    """[path, bytes, mtime_ns]: what identifies a file's contents without reading it; content: [path, bytes,
    blake2b of the bytes] instead (a full read, which an edit that keeps the size and mtime does not fool)."""
    stat = path.stat()
    return [str(path.resolve()), stat.st_size, file_digest(path) if content else stat.st_mtime_ns]


def file_stats(paths: str | os.PathLike | Sequence[str | os.PathLike], content: bool = False) -> list[list]:
    """[path, bytes, mtime_ns] of every file data.paths names (what identifies the corpus without reading it);
    content: the hash of each file's bytes in place of its mtime."""
    return [_stat(path, content) for path in _expand_paths(paths)]


def local_stats(value, content: bool = False):
    """[path, bytes, mtime_ns] of every local file a data_files value or a data set name names (a file, a glob, a
    folder, ~ expanded; lists and tuples element by element); other values (hub names, URLs) as they are.
    content: the hash of each local file's bytes in place of its mtime."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) or (isinstance(value, Sequence) and not isinstance(value, (str, bytes))):
        return [local_stats(v, content) for v in value]
    text = os.path.expanduser(str(value))
    if Path(text).is_dir():
        files = sorted(p for p in Path(text).rglob("*") if p.is_file() and ".git" not in p.parts)
    elif any(c in text for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
    elif Path(text).is_file():
        files = [Path(text)]
    else:
        return str(value)
    return [str(value), *(_stat(p, content) for p in files)]


# --------------------------------------------------------------------------------------------
# the split
# --------------------------------------------------------------------------------------------


def document_key(text: str) -> int:
    """A stable 64-bit number for a document: blake2b of its text (equal texts, equal keys)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def document_bucket(text: str) -> int:
    """A stable number in [0, 10000) for a document: its key modulo 10000."""
    return document_key(text) % _VAL_BUCKETS


def split_keys(keys, val_fraction: float):
    """is_val (bool array) for documents with these keys: a document goes to validation iff its bucket (key
    modulo 10000) < val_fraction * 10000. With two or more documents both splits are non-empty: an empty
    validation split takes the document with the smallest bucket, an empty training split gives back the one
    with the largest."""
    keys = np.asarray(keys, dtype=np.uint64)
    if len(keys) < 2:
        raise DataError(
            f"the corpus has {len(keys)} document(s) but needs at least 2 "
            f"(one for training, one for validation): add text (a .txt file is one document per "
            f"{MAX_TXT_DOCUMENT_CHARS:,} characters, a .jsonl line or a row is one document)"
        )
    if not 0 < val_fraction < 1:
        raise DataError(f"data.val_fraction={val_fraction} must be between 0 and 1 (e.g. 0.05)")
    buckets = (keys % np.uint64(_VAL_BUCKETS)).astype(np.int64)
    is_val = buckets < val_fraction * _VAL_BUCKETS
    if not is_val.any():
        is_val[int(np.argmin(buckets))] = True
    elif is_val.all():
        is_val[int(np.argmax(buckets))] = False
    return is_val


def split_documents(documents: Sequence[str], val_fraction: float) -> tuple[list[str], list[str]]:
    """(train, val): a document goes to validation iff its bucket < val_fraction * 10000.

    Order within each split follows `documents`. With two or more documents both splits are
    non-empty: an empty validation split takes the document with the smallest bucket, an empty
    training split gives back the one with the largest.
    """
    is_val = split_keys([document_key(d) for d in documents], val_fraction)
    train = [d for d, v in zip(documents, is_val, strict=True) if not v]
    val = [d for d, v in zip(documents, is_val, strict=True) if v]
    return train, val
