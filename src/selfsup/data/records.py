"""Records of a labelled task or a minimal-pair set: the values of named fields, from .jsonl / .csv / .parquet
files a record at a time, or from a Hugging Face data set (selfsup.evaluation's tasks and pair sets read theirs
here), read by selfsup.data.sources' readers as training text is. Every problem is one EvalError line naming
the setting to fix (`setting(key)`, e.g. eval.tasks.sst2.text_field)."""

from __future__ import annotations

import csv
from collections.abc import Iterator, Sequence
from pathlib import Path

from selfsup.data.config import TextSource
from selfsup.data.hf_dataset import load_hf
from selfsup.data.sources import DataError, jsonl_objects, one_line, parquet_file, text_lines, warn_once

LABELLED_SUFFIXES = (".jsonl", ".csv", ".parquet")


class EvalError(DataError):
    """A bad evaluation setting or task file; one line saying what is wrong and how to fix it."""


def unique(rows: list, what: str) -> list:
    """`rows` without exact repeats (the first of each kept), with one warning line naming how many were dropped
    (`what`: e.g. "task probe: examples"): a repeated example would count as an independent one in the bootstrap."""
    seen, kept = set(), []
    for row in rows:
        key = tuple(map(repr, row))
        if key not in seen:
            seen.add(key)
            kept.append(row)
    if len(kept) < len(rows):
        warn_once(f"{what}: {len(rows) - len(kept)} exact repeats of {len(rows)} dropped (each counts once)")
    return kept


def check_count(key: str, value, optional: bool = False) -> None:
    """A count setting (examples, pairs, seeds, steps): a whole number of at least 1, or null where `optional`
    (no limit); else EvalError naming the key."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise EvalError(f"{key}={value} must be at least 1 (a whole number)" + ", or null (no limit)" * optional)


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
    fix = f"remove it from {setting('paths')}"
    number = 0
    for number, (where, record, columns) in enumerate(read(p, fields, fix), start=1):
        for field, key in zip(fields, keys):
            if field not in record:
                shown = ", ".join(map(str, columns[:10])) or "none"
                raise EvalError(f"{p}: no field '{field}' in record {number} (fields: {shown}): set {setting(key)}")
        yield where, tuple(record[f] for f in fields)
    if not number:
        raise EvalError(
            f"{p} has no records (no field '{fields[0]}'): add records with the fields {', '.join(map(repr, fields))}"
        )


def _jsonl_records(path: Path, fields, fix: str) -> Iterator[tuple[str, dict, list]]:
    needs = "the fields " + ", ".join(map(repr, fields))
    for number, record in jsonl_objects(path, fix, needs, EvalError):
        yield f"{path}:{number}", record, list(record)


def _csv_records(path: Path, fields, fix: str) -> Iterator[tuple[str, dict, list]]:
    number = 0
    try:  # the file's lines with their ends: quoted newlines stay in the text
        reader = csv.DictReader(line for _, line in text_lines(path, fix, EvalError))
        for number, record in enumerate(reader, start=1):
            yield f"{path}: record {number}", record, reader.fieldnames or []
    except csv.Error as e:
        raise EvalError(f"{path}: record {number + 1} is not valid CSV ({one_line(e)}): {fix}") from None


def _parquet_records(path: Path, fields, fix: str) -> Iterator[tuple[str, dict, list]]:
    file = parquet_file(path, fix, EvalError)
    columns = file.schema_arrow.names
    number = 0
    try:
        for batch in file.iter_batches(batch_size=1024, columns=[f for f in dict.fromkeys(fields) if f in columns]):
            for record in batch.to_pylist():  # records without a missing field: the caller names it
                number += 1
                yield f"{path}: record {number}", record, columns
    except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds
        raise EvalError(f"{path} is not a readable parquet file ({one_line(e)}): {fix}") from None


# ---------------------------------------------------------------------------------------- hf_dataset
def hf_rows(text: TextSource, split: str, fields: Sequence[str], keys: Sequence[str], setting) -> list[tuple]:
    """The values of `fields` of every row of the text's `datasets.load_dataset(hf_name, hf_config, split=split)`,
    as tuples; one line for a data set that does not load or lacks a field (naming setting(keys[i]))."""
    name, config = text.hf_name, text.hf_config
    where = f"{setting('hf_name')}={name}" + (f" (config {config})" if config else "") + f", split {split}"
    data = load_hf(name, config, split, text.data_files, where, "an hf_dataset task", error=EvalError)
    for field, key in zip(fields, keys):
        if field not in data.column_names:
            raise EvalError(
                f"{where} has no column '{field}' (columns: {', '.join(data.column_names[:10])}): set {setting(key)}"
            )
    return list(zip(*(data[f] for f in fields), strict=True))
