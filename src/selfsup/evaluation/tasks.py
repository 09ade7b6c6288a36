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
        try:
            import datasets
        except ImportError:
            raise EvalError("an hf_dataset task needs the datasets package: pip install datasets") from None
        data_files = self.data_files
        if data_files is not None and not isinstance(data_files, str):
            data_files = {str(k): list(map(str, v)) if not isinstance(v, str) else v for k, v in dict(data_files).items()}
        out = []
        verbosity = datasets.logging.get_verbosity()
        datasets.logging.set_verbosity(datasets.logging.CRITICAL)
        try:
            for split in (self.train_split, self.test_split):
                try:
                    data = datasets.load_dataset(self.hf_name, self.hf_config, split=split, data_files=data_files)
                except Exception as e:  # noqa: BLE001 - load_dataset raises many kinds
                    raise EvalError(f"could not load {self.setting('hf_name')}={self.hf_name} split {split}: "
                                    f"{type(e).__name__}: {_one_line(e)}: check the name, config, splits "
                                    f"(train_split / test_split) and data_files") from None
                for field in (self.text_field, self.label_field):
                    if field not in data.column_names:
                        key = "text_field" if field == self.text_field else "label_field"
                        raise EvalError(f"{self.hf_name} split {split} has no column '{field}' (columns: "
                                        f"{', '.join(data.column_names[:10])}): set {self.setting(key)}")
                out.append([(t, y) for t, y in zip(data[self.text_field], data[self.label_field], strict=True)
                            if isinstance(t, str) and t.strip() and y is not None])
        finally:
            datasets.logging.set_verbosity(verbosity)
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


# ---------------------------------------------------------------------------------------- files
def read_labelled(path: str, text_field: str, label_field: str, setting=lambda key: f"eval.tasks.*.{key}"
                  ) -> list[tuple[str, object]]:
    """(text, label) rows of a .jsonl / .csv / .parquet file; empty texts dropped."""
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
        records, fields = _parquet_records(p, text_field, label_field)
    else:
        try:
            text = p.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise EvalError(f"{p} is not UTF-8 text (invalid byte at offset {e.start}): convert it to UTF-8") from None
        if suffix == ".csv":
            reader = csv.DictReader(text.splitlines())
            records, fields = list(reader), reader.fieldnames or []
        else:
            records, fields = [], []
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
                fields = fields or list(record)
    for field, key in ((text_field, "text_field"), (label_field, "label_field")):
        missing = next((i for i, r in enumerate(records) if field not in r), None)
        if missing is not None or not records:
            shown = ", ".join(map(str, fields[:10])) or "none"
            raise EvalError(f"{p}: no field '{field}'" + (f" in record {missing + 1}" if records else "")
                            + f" (fields: {shown}): set {setting(key)}")
    rows = []
    for r in records:
        text, label = r[text_field], r[label_field]
        if isinstance(text, str) and text.strip() and label not in (None, ""):
            rows.append((text, label))
    if not rows:
        raise EvalError(f"{p} has no examples with a non-empty '{text_field}' and '{label_field}'")
    return rows


def _parquet_records(path: Path, text_field: str, label_field: str) -> tuple[list[dict], list[str]]:
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


def probe_sentences() -> list[str]:
    """Sentences of the held-out standard-library docstrings that no built-in corpus document holds,
    each once, in a fixed shuffled order."""
    from selfsup.data.builtin import builtin_documents, stdlib_docstrings
    pretraining = {s for doc in builtin_documents() for s in sentences(doc)}
    found = [s for text in stdlib_docstrings()["held_out"] for s in sentences(text) if s not in pretraining]
    found = list(dict.fromkeys(found))
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
    plain = re.compile(r"^[a-z]+$")
    found = [s for s in probe_sentences() if sum(bool(plain.match(w)) for w in s.split()[1:]) >= 2]
    words = [w for s in found for w in s.split() if plain.match(w)]
    examples = []
    for sentence in found:
        w = sentence.split()
        slots = [j for j in range(1, len(w)) if plain.match(w[j])]
        if task == "replaced_word":
            for j in rng.sample(slots, min(perturb, len(slots))):
                original = w[j]
                while w[j] == original:
                    w[j] = rng.choice(words)
        else:  # word_order: swap neighbouring plain words
            pairs = [j for j in slots if j + 1 in slots] or slots[:1]
            for j in rng.sample(pairs, min(perturb, len(pairs))):
                w[j], w[j + 1] = w[j + 1], w[j]
        examples += [(sentence, 0), (" ".join(w), 1)]
    return examples
