"""Labelled tasks for the downstream probe: (text, label) examples split into train and test.

A `Task` reads its examples from one of the lab's sources:

- `source=builtin`: a task the lab builds from text on every Python install, never in the built-in
  pretraining corpus (sentences of the standard library's private and short docstrings, see
  `selfsup.data.builtin.stdlib_docstrings`), each sentence twice: as written (label 0) and changed
  (label 1). `task=replaced_word`: `perturb` of its words replaced by words drawn from the same text;
  `task=word_order`: `perturb` pairs of neighbouring words swapped. Neither can be told from the bag
  of words alone: they ask whether words fit their context, which is what pretraining learns.
- `source=text_files`: `.jsonl` / `.csv` / `.parquet` files with a text and a label field; test
  examples from `test_paths`, else a deterministic `test_fraction` of the examples.
- `source=hf_dataset`: `datasets.load_dataset(hf_name, hf_config)`, its `train_split` and
  `test_split` (e.g. GLUE SST-2: `sentence` / `label`, splits train / validation).

Every problem is one line (an EvalError) before any training starts.
"""

from __future__ import annotations

import csv
import functools
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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
        train, test = _cap(train, self.max_train_examples), _cap(test, self.max_test_examples)
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
        return examples[:cut], examples[cut:]

    def _files(self) -> tuple[list, list]:
        if not self.paths:
            raise EvalError(f"{self.setting('paths')} is empty: list .jsonl/.csv/.parquet files with "
                            f"'{self.text_field}' and '{self.label_field}' fields")
        rows = [r for p in self.paths for r in read_labelled(p, self.text_field, self.label_field, self.setting)]
        if self.test_paths:
            test = [r for p in self.test_paths for r in read_labelled(p, self.text_field, self.label_field,
                                                                       self.setting)]
            return rows, test
        if not 0 < self.test_fraction < 1:
            raise EvalError(f"{self.setting('test_fraction')}={self.test_fraction} must be between 0 and 1")
        threshold = self.test_fraction * 10_000
        train = [r for r in rows if document_bucket(r[0]) >= threshold]
        test = [r for r in rows if document_bucket(r[0]) < threshold]
        return train, test

    def _hf(self) -> tuple[list, list]:
        if not self.hf_name:
            raise EvalError(f"{self.setting('hf_name')} is not set: name a data set (e.g. glue with hf_config=sst2)")
        out = []
        for split in (self.train_split, self.test_split):
            rows = hf_rows(self.hf_name, self.hf_config, split, self.data_files, [self.text_field, self.label_field],
                           ["text_field", "label_field"], self.setting)
            out.append([(t, y) for t, y in rows if isinstance(t, str) and t.strip() and y is not None])
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
        unseen = {y for _, y in test} - set(values)
        if unseen:
            raise EvalError(f"task {self.name}: test labels {sorted(map(str, unseen))[:5]} never occur in training: "
                            f"the probe cannot predict them; fix the labels or the split")
        ids = {v: i for i, v in enumerate(values)}
        self.classes = [str(v) for v in values]
        return (Examples([t for t, _ in train], [ids[y] for _, y in train]),
                Examples([t for t, _ in test], [ids[y] for _, y in test]))


def _cap(rows: list, limit: int | None) -> list:
    return rows if limit is None or len(rows) <= limit else rows[:limit]


# ---------------------------------------------------------------------------------------- hf_dataset
def hf_rows(name: str, config: str | None, split: str, data_files, fields: Sequence[str], keys: Sequence[str],
            setting) -> list[tuple]:
    """The values of `fields` of every row of `datasets.load_dataset(name, config, split=split)`, as tuples;
    one line for a data set that does not load or lacks a field (naming setting(keys[i]))."""
    try:
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
                  ) -> list[tuple[str, object]]:
    """(text, label) rows of a .jsonl / .csv / .parquet file; empty texts dropped."""
    rows = [(text, label) for text, label in read_records(path, [text_field, label_field],
                                                         ["text_field", "label_field"], setting)
            if isinstance(text, str) and text.strip() and label not in (None, "")]
    if not rows:
        raise EvalError(f"{Path(path).expanduser()} has no examples with a non-empty '{text_field}' and "
                        f"'{label_field}'")
    return rows


def read_records(path: str, fields: Sequence[str], keys: Sequence[str], setting) -> list[tuple]:
    """The values of `fields` of every record of a .jsonl / .csv / .parquet file, as tuples. A missing field
    is refused in one line naming the setting (setting(keys[i])) that chooses it."""
    p = Path(path).expanduser()
    if not p.is_file():
        what = ("is a folder" if p.is_dir() else "is not a regular file (a FIFO, socket or device)" if p.exists()
                else "does not exist")
        raise EvalError(f"{setting('paths')}: {p} {what}: pass .jsonl/.csv/.parquet files")
    suffix = p.suffix.lower()
    if suffix not in LABELLED_SUFFIXES:
        raise EvalError(f"{setting('paths')}: {p} has unsupported extension '{suffix or '(none)'}': use "
                        f"{', '.join(LABELLED_SUFFIXES)}")
    if suffix == ".parquet":
        records, columns = _parquet_records(p)
    else:
        try:
            text = p.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise EvalError(f"{p} is not UTF-8 text (invalid byte at offset {e.start}): convert it to UTF-8") from None
        if suffix == ".csv":
            reader = csv.DictReader(text.splitlines())
            records, columns = list(reader), reader.fieldnames or []
        else:
            records, columns = [], []
            for number, line in enumerate(text.splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as e:
                    raise EvalError(f"{p}:{number}: not valid JSON ({e.msg}): each line must be one JSON object") from None
                if not isinstance(record, dict):
                    raise EvalError(f"{p}:{number}: a JSON {type(record).__name__}, not an object")
                records.append(record)
                columns = columns or list(record)
    for field, key in zip(fields, keys):
        missing = next((i for i, r in enumerate(records) if field not in r), None)
        if missing is not None or not records:
            shown = ", ".join(map(str, columns[:10])) or "none"
            raise EvalError(f"{p}: no field '{field}'" + (f" in record {missing + 1}" if records else "")
                            + f" (fields: {shown}): set {setting(key)}")
    return [tuple(r[f] for f in fields) for r in records]


def _parquet_records(path: Path) -> tuple[list[dict], list[str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise EvalError(f"reading {path} needs pyarrow: pip install pyarrow") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds
        raise EvalError(f"{path} is not a readable parquet file ({_one_line(e)})") from None
    return table.to_pylist(), table.column_names


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
    from selfsup.data.builtin import builtin_documents, stdlib_docstrings
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
