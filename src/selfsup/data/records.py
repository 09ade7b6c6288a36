"""Records of a labelled task or a minimal-pair set: the values of named fields, from .jsonl / .csv / .parquet
files a record at a time, or from a Hugging Face data set (selfsup.evaluation's tasks and pair sets read theirs
here; training text is read by selfsup.data.sources). Every problem is one EvalError line naming the setting
to fix (`setting(key)`, e.g. eval.tasks.sst2.text_field)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

from selfsup.data.sources import DataError, _one_line

LABELLED_SUFFIXES = (".jsonl", ".csv", ".parquet")


class EvalError(DataError):
    """A bad evaluation setting or task file; one line saying what is wrong and how to fix it."""


def read_records(path: str, fields: Sequence[str], keys: Sequence[str], setting) -> list[tuple]:
    """The values of `fields` of every record of a .jsonl / .csv / .parquet file, as tuples. A missing field
    is refused in one line naming the setting (setting(keys[i])) that chooses it."""
    return [values for _, values in records(path, fields, keys, setting)]


def records(path: str, fields: Sequence[str], keys: Sequence[str], setting) -> Iterator[tuple[str, tuple]]:
    """(where: file and line or record, values of `fields`) of each record of a file, read a record at a time."""
    p = Path(path).expanduser()
    if not p.is_file():
        what = (
            "is a folder"
            if p.is_dir()
            else "is not a regular file (a FIFO, socket or device)"
            if p.exists()
            else "does not exist"
        )
        raise EvalError(f"{setting('paths')}: {p} {what}: pass .jsonl/.csv/.parquet files")
    suffix = p.suffix.lower()
    if suffix not in LABELLED_SUFFIXES:
        raise EvalError(
            f"{setting('paths')}: {p} has unsupported extension '{suffix or '(none)'}': use "
            f"{', '.join(LABELLED_SUFFIXES)}"
        )
    read = {".parquet": _parquet_records, ".csv": _csv_records, ".jsonl": _jsonl_records}[suffix]
    number = 0
    for number, (where, record, columns) in enumerate(read(p, fields), start=1):
        for field, key in zip(fields, keys):
            if field not in record:
                shown = ", ".join(map(str, columns[:10])) or "none"
                raise EvalError(f"{p}: no field '{field}' in record {number} (fields: {shown}): set {setting(key)}")
        yield where, tuple(record[f] for f in fields)
    if not number:
        raise EvalError(
            f"{p} has no records (no field '{fields[0]}'): add records with the fields {', '.join(map(repr, fields))}"
        )


def _jsonl_records(path: Path, fields) -> Iterator[tuple[str, dict, list]]:
    try:
        with open(path, encoding="utf-8-sig", newline="\n") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise EvalError(
                        f"{path}:{number}: not valid JSON ({e.msg}): each line must be one JSON object"
                    ) from None
                if not isinstance(record, dict):
                    raise EvalError(f"{path}:{number}: a JSON {type(record).__name__}, not an object")
                yield f"{path}:{number}", record, list(record)
    except UnicodeDecodeError:
        raise _not_utf8(path) from None


def _csv_records(path: Path, fields) -> Iterator[tuple[str, dict, list]]:
    number = 0
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:  # newline="": quoted newlines stay in the text
            reader = csv.DictReader(f)
            for number, record in enumerate(reader, start=1):
                yield f"{path}: record {number}", record, reader.fieldnames or []
    except UnicodeDecodeError:
        raise _not_utf8(path) from None
    except csv.Error as e:
        raise EvalError(f"{path}: record {number + 1} is not valid CSV ({_one_line(e)}): fix the file") from None


def _not_utf8(path: Path) -> EvalError:
    offset = 0
    with open(path, "rb") as f:
        for line in f:  # a UTF-8 character never holds a newline byte
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                offset += e.start
                break
            offset += len(line)
    return EvalError(f"{path} is not UTF-8 text (invalid byte at offset {offset}): convert it to UTF-8")


def _parquet_records(path: Path, fields) -> Iterator[tuple[str, dict, list]]:
    try:  # pyarrow is imported here, not at the top: ~0.2 s, kept out of `selfsup-train`'s start
        import pyarrow.parquet as pq
    except ImportError:
        raise EvalError(f"reading {path} needs pyarrow: pip install pyarrow") from None
    number = 0
    try:
        file = pq.ParquetFile(path)
        columns = file.schema_arrow.names
        batches = file.iter_batches(batch_size=1024, columns=[f for f in dict.fromkeys(fields) if f in columns])
        for batch in batches:  # records without a missing field: the caller names it
            for record in batch.to_pylist():
                number += 1
                yield f"{path}: record {number}", record, columns
    except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds
        raise EvalError(f"{path} is not a readable parquet file ({_one_line(e)})") from None


# ---------------------------------------------------------------------------------------- hf_dataset
def hf_rows(
    name: str, config: str | None, split: str, data_files, fields: Sequence[str], keys: Sequence[str], setting
) -> list[tuple]:
    """The values of `fields` of every row of `datasets.load_dataset(name, config, split=split)`, as tuples;
    one line for a data set that does not load or lacks a field (naming setting(keys[i]))."""
    try:  # datasets is imported here, not at the top: it and pyarrow take ~1 s, kept out of `selfsup-train`'s start
        import datasets
    except ImportError:
        raise EvalError("an hf_dataset task needs the datasets package: pip install datasets") from None
    if data_files is not None and not isinstance(data_files, str):
        data_files = {str(k): list(map(str, v)) if not isinstance(v, str) else v for k, v in dict(data_files).items()}
    verbosity = datasets.logging.get_verbosity()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    try:
        try:
            data = datasets.load_dataset(name, config, split=split, data_files=data_files)
        except Exception as e:  # noqa: BLE001 - load_dataset raises many kinds
            raise EvalError(
                f"could not load {setting('hf_name')}={name} split {split}: {type(e).__name__}: "
                f"{_one_line(e)}: check the name, config, splits and data_files"
            ) from None
    finally:
        datasets.logging.set_verbosity(verbosity)
    for field, key in zip(fields, keys):
        if field not in data.column_names:
            raise EvalError(
                f"{name} split {split} has no column '{field}' (columns: "
                f"{', '.join(data.column_names[:10])}): set {setting(key)}"
            )
    return list(zip(*(data[f] for f in fields), strict=True))
