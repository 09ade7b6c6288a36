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

import functools
import numbers
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from selfsup.data.builtin import builtin_documents, stdlib_docstrings
from selfsup.data.records import EvalError, check_count, hf_rows, records, unique
from selfsup.data.sources import document_bucket

BUILTIN_TASKS = ("replaced_word", "word_order")
SOURCES = ("builtin", "text_files", "hf_dataset")


@dataclass
class Examples:
    texts: list[str]
    labels: list[int]  # class ids, indexes into the task's `classes`

    def __len__(self) -> int:
        return len(self.texts)


class Task:
    """A labelled task: `load()` -> (train Examples, test Examples); `classes` names the labels."""

    def __init__(
        self,
        source: str = "builtin",
        task: str = "replaced_word",
        perturb: int = 4,
        paths: Sequence[str] = (),
        test_paths: Sequence[str] = (),
        text_field: str = "text",
        label_field: str = "label",
        test_fraction: float = 0.2,
        hf_name: str | None = None,
        hf_config: str | None = None,
        data_files=None,
        train_split: str = "train",
        test_split: str = "validation",
        max_train_examples: int | None = 8000,
        max_test_examples: int | None = 2000,
        name: str = "task",
    ):
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
        check_count(self.setting("max_train_examples"), self.max_train_examples, optional=True)
        check_count(self.setting("max_test_examples"), self.max_test_examples, optional=True)
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
            raise EvalError(
                f"{self.setting('task')}={self.task} is not a built-in task: use one of "
                f"{', '.join(BUILTIN_TASKS)}, or source=text_files / hf_dataset for your own data"
            )
        check_count(self.setting("perturb"), self.perturb)  # words changed per sentence
        examples = builtin_examples(self.task, self.perturb)
        cut = 2 * int(len(examples) / 2 * (1 - self.test_fraction))  # a sentence and its change: one split
        return list(examples[:cut][: self.max_train_examples]), list(examples[cut:][: self.max_test_examples])

    def _files(self) -> tuple[list, list]:
        if not self.paths:
            raise EvalError(
                f"{self.setting('paths')} is empty: list .jsonl/.csv/.parquet files with "
                f"'{self.text_field}' and '{self.label_field}' fields"
            )

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
            rows = hf_rows(
                self.hf_name,
                self.hf_config,
                split,
                self.data_files,
                [self.text_field, self.label_field],
                ["text_field", "label_field"],
                self.setting,
            )
            kept = Reservoir(limit)
            kept.extend(
                (t, class_label(y, f"{self.hf_name} split {split} row {i}", self.label_field, self.setting))
                for i, (t, y) in enumerate(rows, start=1)
                if isinstance(t, str) and t.strip() and y not in (None, "")
            )
            out.append(kept.rows())
        return out[0], out[1]

    def _encode_labels(self, train: list, test: list) -> tuple[Examples, Examples]:
        train = unique(train, f"task {self.name}: training examples")
        test = unique(test, f"task {self.name}: test examples")
        if not train or not test:
            which = "training" if not train else "test"
            raise EvalError(
                f"task {self.name} has no {which} examples: add examples"
                + (f" or change {self.setting('test_fraction')}" if self.source == "text_files" else "")
            )
        values = sorted({y for _, y in train + test}, key=lambda v: (str(type(v)), v))
        if len(values) < 2:
            raise EvalError(
                f"task {self.name}: every example has label {values[0]!r}: a task needs at least "
                f"2 classes ({self.setting('label_field')}={self.label_field})"
            )
        if len(train) < len(values):
            raise EvalError(
                f"task {self.name}: {len(train)} training examples for {len(values)} classes: a task "
                f"needs at least one example per class: add examples or check "
                f"{self.setting('label_field')}"
            )
        unseen = {y for _, y in test} - {y for _, y in train}
        if unseen:
            raise EvalError(
                f"task {self.name}: test labels {sorted(map(str, unseen))[:5]} never occur in training: "
                f"the probe cannot predict them; fix the labels or the split"
            )
        ids = {v: i for i, v in enumerate(values)}
        self.classes = [str(v) for v in values]
        return (
            Examples([t for t, _ in train], [ids[y] for _, y in train]),
            Examples([t for t, _ in test], [ids[y] for _, y in test]),
        )


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
    raise EvalError(
        f"{where}: field '{field}' holds {kind}, not a class label: pass a string, int or bool label "
        f"per example, or set {setting('label_field')} to the field that holds one"
    )


# ---------------------------------------------------------------------------------------- files
def read_labelled(
    path: str, text_field: str, label_field: str, setting=lambda key: f"eval.tasks.*.{key}"
) -> Iterator[tuple[str, object]]:
    """(text, label) rows of a .jsonl / .csv / .parquet file, a record at a time; rows with an empty text or
    label left out, a label that is not a class refused (see class_label)."""
    found = False
    for where, (text, label) in records(path, [text_field, label_field], ["text_field", "label_field"], setting):
        if isinstance(text, str) and text.strip() and label not in (None, ""):
            found = True
            yield text, class_label(label, where, label_field, setting)
    if not found:
        raise EvalError(
            f"{Path(path).expanduser()} has no examples with a non-empty '{text_field}' and '{label_field}'"
        )


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
    shingles = {tuple(words[i : i + 4]) for i in range(len(words) - 3)}

    def in_pretraining(sentence: str) -> bool:
        inner = sentence.split()[1:-1]  # whole words wherever the sentence occurs (its ends may be parts)
        return all(tuple(inner[i : i + 4]) in shingles for i in range(len(inner) - 3)) and sentence in text

    found = list(dict.fromkeys(s for doc in stdlib_docstrings()["held_out"] for s in sentences(doc)))
    found = [s for s in found if not in_pretraining(s)]
    random.Random(0).shuffle(found)
    return found


@functools.cache
def builtin_examples(task: str, perturb: int) -> tuple[tuple[str, int], ...]:
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
    return tuple(examples)


PLAIN = re.compile(r"^[a-z]+$")


def perturb_words(
    words: list[str], task: str, count: int, rng: random.Random, vocabulary: Sequence[str], exact: bool = False
) -> list[str] | None:
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
