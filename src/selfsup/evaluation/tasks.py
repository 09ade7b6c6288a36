"""Labelled tasks for the downstream probe: (text, label) examples split into train and test.

A `Task` reads its examples from one of the lab's sources:

- `source=builtin`: a task the lab builds from text on every Python install, never in the built-in
  pretraining corpus (sentences of the standard library's private and short docstrings, see
  `selfsup.data.builtin.stdlib_docstrings`), each sentence twice: as written (label 0) and changed
  (label 1). `task=replaced_word`: `perturb` of its words replaced by words drawn from the same text;
  `task=word_order`: `perturb` pairs of neighbouring words swapped. Neither can be told from the bag
  of words alone: they ask whether words fit their context, which is what pretraining learns.
- `source=text_files`: `.jsonl` / `.csv` / `.parquet` files with a text and a label field, read a
  record at a time; test examples from `test_paths`, else a deterministic `test_fraction` of the examples.
- `source=hf_dataset`: `datasets.load_dataset(hf_name, hf_config)`, its `train_split` and
  `test_split` (e.g. GLUE SST-2: `sentence` / `label`, splits train / validation).

Labels are classes: strings, ints or bools (whole-number floats too); examples with an empty text or
label are left out. `max_train_examples` / `max_test_examples` keep at most that many examples: of the
built-in task the first ones (a sentence and its change stay together), of files and data sets a uniform
random sample in their order (reservoir sampling with a fixed seed: the same files give the same sample;
of files only the sample is held). Every problem is one line (an EvalError) before any training starts.
"""

from __future__ import annotations

import csv
import functools
import json
import numbers
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from selfsup.data.builtin import builtin_documents, stdlib_docstrings
from selfsup.data.sources import DataError, _one_line, document_bucket

BUILTIN_TASKS = ("replaced_word", "word_order")
SOURCES = ("builtin", "text_files", "hf_dataset")
LABELLED_SUFFIXES = (".jsonl", ".csv", ".parquet")


class EvalError(DataError):
    """A bad evaluation setting or task file; one line saying what is wrong and how to fix it."""


@dataclass
class Examples:
    texts: list[str]
    labels: list[int]  # class ids, indexes into the task's `classes`

    def __len__(self) -> int:
        return len(self.texts)


class Task:
    """A labelled task: `load()` -> (train Examples, test Examples); `classes` names the labels."""

    def __init__(self, source: str = "builtin", task: str = "replaced_word", perturb: int = 4,
                 paths: Sequence[str] = (), test_paths: Sequence[str] = (), text_field: str = "text",
                 label_field: str = "label", test_fraction: float = 0.2, hf_name: str | None = None,
                 hf_config: str | None = None, data_files=None, train_split: str = "train",
                 test_split: str = "validation", max_train_examples: int | None = 8000,
                 max_test_examples: int | None = 2000, name: str = "task"):
        self.source, self.task, self.perturb = source, task, perturb
        self.paths, self.test_paths = list(paths or ()), list(test_paths or ())
        self.text_field, self.label_field, self.test_fraction = text_field, label_field, test_fraction
        self.hf_name, self.hf_config, self.data_files = hf_name, hf_config, data_files
        self.train_split, self.test_split = train_split, test_split
        self.max_train_examples, self.max_test_examples = max_train_examples, max_test_examples
        self.name = name
        self.classes: list[str] = []
        self._loaded: tuple[Examples, Examples] | None = None

    def setting(self, key: str) -> str:
        return f"eval.tasks.{self.name}.{key}"

    # ------------------------------------------------------------------------------------ loading
    def load(self) -> tuple[Examples, Examples]:
        """(train, test), read once; raises EvalError for anything a user must fix."""
        if self._loaded is not None:
            return self._loaded
        if self.source not in SOURCES:
            raise EvalError(f"{self.setting('source')}={self.source} is unknown: use one of {', '.join(SOURCES)}")
        if self.source == "builtin":
            train, test = self._builtin()
        elif self.source == "text_files":
            train, test = self._files()
        else:
            train, test = self._hf()
        self._loaded = self._encode_labels(train, test)
        return self._loaded

    def _builtin(self) -> tuple[list[tuple[str, object]], list[tuple[str, object]]]:
        if self.task not in BUILTIN_TASKS:
            raise EvalError(f"{self.setting('task')}={self.task} is not a built-in task: use one of "
                            f"{', '.join(BUILTIN_TASKS)}, or source=text_files / hf_dataset for your own data")
        if self.perturb < 1:
            raise EvalError(f"{self.setting('perturb')}={self.perturb} must be at least 1 (words changed per sentence)")
        examples = builtin_examples(self.task, self.perturb)
        cut = 2 * int(len(examples) / 2 * (1 - self.test_fraction))  # a sentence and its change: one split
        return examples[:cut][:self.max_train_examples], examples[cut:][:self.max_test_examples]

    def _files(self) -> tuple[list, list]:
        if not self.paths:
            raise EvalError(f"{self.setting('paths')} is empty: list .jsonl/.csv/.parquet files with "
                            f"'{self.text_field}' and '{self.label_field}' fields")

        def rows(paths):
            return (r for p in paths for r in read_labelled(p, self.text_field, self.label_field, self.setting))

        train, test = Reservoir(self.max_train_examples), Reservoir(self.max_test_examples)
        if self.test_paths:
            train.extend(rows(self.paths))
            test.extend(rows(self.test_paths))
        else:
            if not 0 < self.test_fraction < 1:
                raise EvalError(f"{self.setting('test_fraction')}={self.test_fraction} must be between 0 and 1")
            threshold = self.test_fraction * 10_000
            for row in rows(self.paths):
                (test if document_bucket(row[0]) < threshold else train).add(row)
        return train.rows(), test.rows()

    def _hf(self) -> tuple[list, list]:
        if not self.hf_name:
            raise EvalError(f"{self.setting('hf_name')} is not set: name a data set (e.g. glue with hf_config=sst2)")
        out = []
        for split, limit in ((self.train_split, self.max_train_examples), (self.test_split, self.max_test_examples)):
            rows = hf_rows(self.hf_name, self.hf_config, split, self.data_files, [self.text_field, self.label_field],
                           ["text_field", "label_field"], self.setting)
            kept = Reservoir(limit)
            kept.extend((t, class_label(y, f"{self.hf_name} split {split} row {i}", self.label_field, self.setting))
                        for i, (t, y) in enumerate(rows, start=1)
                        if isinstance(t, str) and t.strip() and y not in (None, ""))
            out.append(kept.rows())
        return out[0], out[1]

    def _encode_labels(self, train: list, test: list) -> tuple[Examples, Examples]:
        if not train or not test:
            which = "training" if not train else "test"
            raise EvalError(f"task {self.name} has no {which} examples: add examples"
                            + (f" or change {self.setting('test_fraction')}" if self.source == "text_files" else ""))
        values = sorted({y for _, y in train + test}, key=lambda v: (str(type(v)), v))
        if len(values) < 2:
            raise EvalError(f"task {self.name}: every example has label {values[0]!r}: a task needs at least "
                            f"2 classes ({self.setting('label_field')}={self.label_field})")
        if len(train) < len(values):
            raise EvalError(f"task {self.name}: {len(train)} training examples for {len(values)} classes: a task "
                            f"needs at least one example per class: add examples or check "
                            f"{self.setting('label_field')}")
        unseen = {y for _, y in test} - {y for _, y in train}
        if unseen:
            raise EvalError(f"task {self.name}: test labels {sorted(map(str, unseen))[:5]} never occur in training: "
                            f"the probe cannot predict them; fix the labels or the split")
        ids = {v: i for i, v in enumerate(values)}
        self.classes = [str(v) for v in values]
        return (Examples([t for t, _ in train], [ids[y] for _, y in train]),
                Examples([t for t, _ in test], [ids[y] for _, y in test]))


class Reservoir:
    """A uniform random sample of at most `size` of the rows added (all of them when None or fewer), in the
    order added: reservoir sampling with a fixed seed, holding only the sample."""

    def __init__(self, size: int | None, seed: int = 0):
        self.size, self.rng, self.seen, self.kept = size, random.Random(seed), 0, []

    def add(self, row) -> None:
        if self.size is None or self.seen < self.size:
            self.kept.append((self.seen, row))
        else:
            j = self.rng.randrange(self.seen + 1)
            if j < self.size:
                self.kept[j] = (self.seen, row)
        self.seen += 1

    def extend(self, rows: Iterable) -> None:
        for row in rows:
            self.add(row)

    def rows(self) -> list:
        return [row for _, row in sorted(self.kept, key=lambda kept: kept[0])]


def class_label(value, where: str, field: str, setting):
    """`value` if it can be a class label (a string, int or bool, or a whole-number float), else one line
    naming where it is (a file and line or record) and the field."""
    if isinstance(value, (str, numbers.Integral)) or (isinstance(value, float) and value.is_integer()):
        return value
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    kind = f"the number {value}" if isinstance(value, float) else f"a {type(value).__name__} ({shown})"
    raise EvalError(f"{where}: field '{field}' holds {kind}, not a class label: pass a string, int or bool label "
                    f"per example, or set {setting('label_field')} to the field that holds one")


# ---------------------------------------------------------------------------------------- hf_dataset
def hf_rows(name: str, config: str | None, split: str, data_files, fields: Sequence[str], keys: Sequence[str],
            setting) -> list[tuple]:
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
            raise EvalError(f"could not load {setting('hf_name')}={name} split {split}: {type(e).__name__}: "
                            f"{_one_line(e)}: check the name, config, splits and data_files") from None
    finally:
        datasets.logging.set_verbosity(verbosity)
    for field, key in zip(fields, keys):
        if field not in data.column_names:
            raise EvalError(f"{name} split {split} has no column '{field}' (columns: "
                            f"{', '.join(data.column_names[:10])}): set {setting(key)}")
    return list(zip(*(data[f] for f in fields), strict=True))


# ---------------------------------------------------------------------------------------- files
def read_labelled(path: str, text_field: str, label_field: str, setting=lambda key: f"eval.tasks.*.{key}"
                  ) -> Iterator[tuple[str, object]]:
    """(text, label) rows of a .jsonl / .csv / .parquet file, a record at a time; rows with an empty text or
    label left out, a label that is not a class refused (see class_label)."""
    found = False
    for where, (text, label) in _records(path, [text_field, label_field], ["text_field", "label_field"], setting):
        if isinstance(text, str) and text.strip() and label not in (None, ""):
            found = True
            yield text, class_label(label, where, label_field, setting)
    if not found:
        raise EvalError(f"{Path(path).expanduser()} has no examples with a non-empty '{text_field}' and "
                        f"'{label_field}'")


def read_records(path: str, fields: Sequence[str], keys: Sequence[str], setting) -> list[tuple]:
    """The values of `fields` of every record of a .jsonl / .csv / .parquet file, as tuples. A missing field
    is refused in one line naming the setting (setting(keys[i])) that chooses it."""
    return [values for _, values in _records(path, fields, keys, setting)]


def _records(path: str, fields: Sequence[str], keys: Sequence[str], setting) -> Iterator[tuple[str, tuple]]:
    """(where: file and line or record, values of `fields`) of each record of a file, read a record at a time."""
    p = Path(path).expanduser()
    if not p.is_file():
        what = ("is a folder" if p.is_dir() else "is not a regular file (a FIFO, socket or device)" if p.exists()
                else "does not exist")
        raise EvalError(f"{setting('paths')}: {p} {what}: pass .jsonl/.csv/.parquet files")
    suffix = p.suffix.lower()
    if suffix not in LABELLED_SUFFIXES:
        raise EvalError(f"{setting('paths')}: {p} has unsupported extension '{suffix or '(none)'}': use "
                        f"{', '.join(LABELLED_SUFFIXES)}")
    read = {".parquet": _parquet_records, ".csv": _csv_records, ".jsonl": _jsonl_records}[suffix]
    number = 0
    for number, (where, record, columns) in enumerate(read(p, fields), start=1):
        for field, key in zip(fields, keys):
            if field not in record:
                shown = ", ".join(map(str, columns[:10])) or "none"
                raise EvalError(f"{p}: no field '{field}' in record {number} (fields: {shown}): set {setting(key)}")
        yield where, tuple(record[f] for f in fields)
    if not number:
        raise EvalError(f"{p} has no records (no field '{fields[0]}'): add records with the fields "
                        f"{', '.join(map(repr, fields))}")


def _jsonl_records(path: Path, fields) -> Iterator[tuple[str, dict, list]]:
    try:
        with open(path, encoding="utf-8-sig", newline="\n") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise EvalError(f"{path}:{number}: not valid JSON ({e.msg}): each line must be one JSON "
                                    f"object") from None
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


# ---------------------------------------------------------------------------------------- built-in
WORD = re.compile(r"^[A-Za-z][a-z]*[,;:.]?$")


def sentences(text: str) -> list[str]:
    """Sentences of prose in a docstring: 6-40 words, most of them plain words (code and tables dropped)."""
    found = []
    for paragraph in re.split(r"\n\s*\n", text):
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z])", " ".join(paragraph.split())):
            words = sentence.split()
            if 6 <= len(words) <= 40 and sum(bool(WORD.match(w)) for w in words) >= 0.8 * len(words):
                found.append(sentence)
    return found


@functools.cache
def probe_sentences() -> list[str]:
    """Sentences of the held-out standard-library docstrings that no built-in corpus document holds
    (not even inside a longer sentence), each once, in a fixed shuffled order."""
    text = " ".join(" ".join(doc.split()) for doc in builtin_documents())
    words = text.split()
    shingles = {tuple(words[i:i + 4]) for i in range(len(words) - 3)}

    def in_pretraining(sentence: str) -> bool:
        inner = sentence.split()[1:-1]  # whole words wherever the sentence occurs (its ends may be parts)
        return all(tuple(inner[i:i + 4]) in shingles for i in range(len(inner) - 3)) and sentence in text

    found = list(dict.fromkeys(s for doc in stdlib_docstrings()["held_out"] for s in sentences(doc)))
    found = [s for s in found if not in_pretraining(s)]
    random.Random(0).shuffle(found)
    return found


def builtin_examples(task: str, perturb: int) -> list[tuple[str, int]]:
    """Each sentence twice, in order: as written (label 0) and changed (label 1); deterministic.

    Only lower-case plain words change (never the first word or one with punctuation), and a replaced
    word is drawn from the lower-case plain words of the same sentences: neither capitals nor stray
    punctuation give a change away, only whether the words fit their context. Sentences with fewer
    than two such words are left out.
    """
    rng = random.Random(1)
    found = [s for s in probe_sentences() if sum(bool(PLAIN.match(w)) for w in s.split()[1:]) >= 2]
    words = [w for s in found for w in s.split() if PLAIN.match(w)]
    examples = []
    for sentence in found:
        changed = perturb_words(sentence.split(), task, perturb, rng, words)
        examples += [(sentence, 0), (" ".join(changed), 1)]
    return examples


PLAIN = re.compile(r"^[a-z]+$")


def perturb_words(words: list[str], task: str, count: int, rng: random.Random, vocabulary: Sequence[str],
                  exact: bool = False) -> list[str] | None:
    """A copy of a sentence's words with `count` plain lower-case words (never the first) replaced by other
    words of `vocabulary` (task 'replaced_word'), or `count` pairs of neighbouring plain words swapped
    ('word_order'). exact=False: as many as the sentence has (the probe's examples); exact=True: exactly
    `count`, of different neighbours and pairs that do not overlap, else None (minimal pairs)."""
    w = list(words)
    slots = [j for j in range(1, len(w)) if PLAIN.match(w[j])]
    if task == "replaced_word":
        if exact and len(slots) < count:
            return None
        for j in rng.sample(slots, min(count, len(slots))):
            original = w[j]
            while w[j] == original:
                w[j] = rng.choice(vocabulary)
        return w
    if exact:
        pairs = [j for j in slots if j + 1 in slots and w[j] != w[j + 1]]
        if len(pairs) < count:
            return None
        chosen = rng.sample(pairs, count)
        if any(abs(a - b) < 2 for a in chosen for b in chosen if a != b):
            return None
    else:
        pairs = [j for j in slots if j + 1 in slots] or slots[:1]
        chosen = rng.sample(pairs, min(count, len(pairs)))
    for j in chosen:
        w[j], w[j + 1] = w[j + 1], w[j]
    return w
