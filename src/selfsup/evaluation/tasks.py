"""Labelled tasks for the downstream probe and fine-tuning: (text, label) or (text pair, label) examples split
into train and test.

A task has one text field (`text_field`) or names two (`text_fields: [premise, hypothesis]`, a sentence-pair
task, GLUE's and SuperGLUE's layouts as they are: RTE and MRPC `sentence1` / `sentence2`, MNLI `premise` /
`hypothesis`, BoolQ `question` / `passage`). A `Task` reads its examples from one of the lab's sources:

- `source=builtin`: a task the lab builds from text on every Python install, never in the built-in
  pretraining corpus (sentences of the standard library's private and short docstrings, see
  `selfsup.data.builtin.stdlib_docstrings`). `task=replaced_word` / `word_order`: each sentence twice, as
  written (label 0) and changed (label 1): `perturb` of its words replaced by words drawn from the same text,
  or `perturb` pairs of neighbouring words swapped. Neither can be told from the bag of words alone: they ask
  whether words fit their context, which is what pretraining learns. `task=next_sentence` (a sentence pair):
  does sentence B follow sentence A in the same docstring? Each pair of neighbouring sentences once, with B the
  true next sentence (label 1) or (label 0) a sentence of another docstring of the nearest word count, each
  sentence a B at most once and only in its split (see next_sentence_examples); balanced, split by docstring.
- `source=text_files`: `.jsonl` / `.csv` / `.parquet` files with the text field(s) and a label field, read a
  record at a time; test examples from `test_paths`, else a deterministic `test_fraction` of the examples.
- `source=hf_dataset`: `datasets.load_dataset(hf_name, hf_config)`, its `train_split` and
  `test_split` (e.g. GLUE SST-2: `sentence` / `label`, splits train / validation; GLUE's test labels are
  hidden, so its validation split is the test split, MNLI's `validation_matched`).

Labels are classes: strings, ints or bools (whole-number floats too; a regression label such as STS-B's is
refused), equal values one class whatever their type (1, 1.0, True, "1": `label_key`, said in one line); examples
with an empty text or label are left out; test examples that repeat a training text are counted in one line.
`max_train_examples` / `max_test_examples` keep at most that many examples: of the built-in task the first ones
(a sentence and its change stay together), of files and data sets a uniform random sample in their order
(reservoir sampling with a fixed seed: the same files give the same sample; of files only the sample is held).
Every problem is one line (an EvalError) before any training starts.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from selfsup.data.config import TextSource
from selfsup.data.records import EvalError, check_count, records, unique
from selfsup.data.sources import warn_once
from selfsup.evaluation.builtin import builtin_examples, next_sentence_examples
from selfsup.evaluation.splits import SOURCES, hf_splits, split_files

BUILTIN_TASKS = ("replaced_word", "word_order", "next_sentence")
PAIR_TASKS = ("next_sentence",)  # built-in tasks of sentence pairs

Text = str | tuple[str, str]  # one text, or a sentence pair


@dataclass
class Examples:
    texts: list[Text]
    labels: list[int]  # class ids, indexes into the task's `classes`

    def __len__(self) -> int:
        return len(self.texts)


def parts(text: Text) -> tuple[str, ...]:
    """The texts of an example: (text,) or (first, second)."""
    return (text,) if isinstance(text, str) else tuple(text)


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
        text_fields: Sequence[str] | None = None,
        label_field: str = "label",
        test_fraction: float = 0.2,
        hf_name: str | None = None,
        hf_config: str | None = None,
        data_files=None,
        train_split: str = "train",
        test_split: str = "validation",
        max_train_examples: int | None = 8000,
        max_test_examples: int | None = 2000,
        protocol: str | None = None,
        name: str = "task",
    ):
        self.text = TextSource.of(source, paths, hf_name, hf_config, data_files)  # where its examples are read
        self.task, self.perturb = task, perturb
        self.test_paths = list(test_paths or ())
        self.text_field, self.label_field, self.test_fraction = text_field, label_field, test_fraction
        self.text_fields = list(text_fields) if text_fields else None
        self.train_split, self.test_split = train_split, test_split
        self.max_train_examples, self.max_test_examples = max_train_examples, max_test_examples
        self.found: tuple[int, int] | None = None  # (training, test) examples before the max_*_examples caps
        self.protocol = protocol  # linear | finetune; None: eval.probe.protocol
        self.name = name
        self.classes: list[str] = []
        self._loaded: tuple[Examples, Examples] | None = None

    def setting(self, key: str) -> str:
        return f"eval.tasks.{self.name}.{key}"

    @property
    def fields(self) -> list[str]:
        """The fields holding an example's text(s): text_fields where set, else [text_field]."""
        return self.text_fields or [self.text_field]

    @property
    def is_pairs(self) -> bool:
        """Whether the examples are sentence pairs."""
        return len(self.fields) == 2 if self.text.source != "builtin" else self.task in PAIR_TASKS

    # ------------------------------------------------------------------------------------ loading
    def load(self) -> tuple[Examples, Examples]:
        """(train, test), read once; raises EvalError for anything a user must fix."""
        if self._loaded is not None:
            return self._loaded
        if self.text.source not in SOURCES:
            raise EvalError(f"{self.setting('source')}={self.text.source} is unknown: use one of {', '.join(SOURCES)}")
        check_count(self.setting("max_train_examples"), self.max_train_examples, optional=True)
        check_count(self.setting("max_test_examples"), self.max_test_examples, optional=True)
        if not 1 <= len(self.fields) <= 2 or not all(isinstance(f, str) and f for f in self.fields):
            raise EvalError(
                f"{self.setting('text_fields')}={self.text_fields} must name one or two fields (a text, or a "
                f"sentence pair such as [premise, hypothesis])"
            )
        if self.text.source == "builtin":
            train, test = self._builtin()
        elif self.text.source == "text_files":
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
        if self.task in PAIR_TASKS:
            examples = next_sentence_examples(self.test_fraction)
            train = [(pair, y) for pair, y, _, in_test in examples if not in_test]
            test = [(pair, y) for pair, y, _, in_test in examples if in_test]
            self.found = len(train), len(test)
            return train[: self.max_train_examples], test[: self.max_test_examples]
        check_count(self.setting("perturb"), self.perturb)  # words changed per sentence
        examples = builtin_examples(self.task, self.perturb)
        cut = 2 * int(len(examples) / 2 * (1 - self.test_fraction))  # a sentence and its change: one split
        self.found = cut, len(examples) - cut
        return list(examples[:cut][: self.max_train_examples]), list(examples[cut:][: self.max_test_examples])

    def _files(self) -> tuple[list, list]:
        if not self.text.paths:
            fields = ", ".join(f"'{f}'" for f in self.fields)
            raise EvalError(
                f"{self.setting('paths')} is empty: list .jsonl/.csv/.parquet files with "
                f"{fields} and '{self.label_field}' fields"
            )

        def rows(paths, setting):
            return (r for p in paths for r in read_labelled(p, self.fields, self.label_field, setting))

        return split_files(self, rows, lambda row: "\n".join(parts(row[0])))

    def _hf(self) -> tuple[list, list]:
        if not self.text.hf_name:
            raise EvalError(f"{self.setting('hf_name')} is not set: name a data set (e.g. glue with hf_config=sst2)")

        def example(row: tuple, where: str):
            if has_text(row[:-1]) and row[-1] not in (None, ""):
                return text(row[:-1]), class_label(row[-1], where, self.label_field, self.setting)
            return None

        return hf_splits(self, [*self.fields, self.label_field], [*self.field_keys, "label_field"], example)

    @property
    def field_keys(self) -> list[str]:
        """The setting that names each of `fields`, for messages."""
        return ["text_fields"] * 2 if self.text_fields else ["text_field"]

    def _encode_labels(self, train: list, test: list) -> tuple[Examples, Examples]:
        written: dict = {}  # each class's labels as the files wrote them, by repr (1 and 1.0 apart)

        def keyed(examples: list) -> list:
            out = []
            for t, y in examples:
                key = label_key(y)
                written.setdefault(key, {})[repr(y)] = y
                out.append((t, key))
            return out

        train = unique(keyed(train), f"task {self.name}: training examples")
        test = unique(keyed(test), f"task {self.name}: test examples")
        merged = [" and ".join(sorted(w)) for w in written.values() if len(w) > 1]
        if merged:
            warn_once(f"task {self.name}: labels written differently read as one class each: {'; '.join(merged)}")
        seen = {t for t, _ in train}
        repeated = sum(t in seen for t, _ in test)
        if repeated:
            warn_once(
                f"task {self.name}: {repeated} of {len(test)} test examples repeat a training example's text: "
                f"they are scored as they are (remove them from the test split for a clean test)"
            )
        if not train or not test:
            which = "training" if not train else "test"
            raise EvalError(
                f"task {self.name} has no {which} examples: add examples"
                + (f" or change {self.setting('test_fraction')}" if self.text.source == "text_files" else "")
            )
        values = sorted({y for _, y in train + test}, key=class_order)
        if len(values) < 2:
            raise EvalError(
                f"task {self.name}: every example has label {min(written[values[0]])}: a task needs at least "
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

            def shown(keys) -> str:
                return ", ".join(min(written[k]) for k in sorted(keys, key=class_order)[:5])

            raise EvalError(
                f"task {self.name}: test labels {shown(unseen)} never occur in training, whose labels are "
                f"{shown({y for _, y in train})}: the probe cannot predict them; fix the labels or the split"
            )
        ids = {v: i for i, v in enumerate(values)}
        self.classes = [min(map(str, written[v].values())) for v in values]
        return (
            Examples([t for t, _ in train], [ids[y] for _, y in train]),
            Examples([t for t, _ in test], [ids[y] for _, y in test]),
        )


def class_order(key) -> tuple:
    """The order of label_key's classes: numbers first, by value, then texts."""
    return isinstance(key, str), key


def label_key(value) -> int | str:
    """The class a label names: bools, ints, whole floats and strings of a whole number (or true / false, any
    case) by their number, so 1, 1.0, True and "1" (a CSV beside a .jsonl) are one class; other strings as
    written, trimmed."""
    if isinstance(value, (numbers.Integral, float)):
        return int(value)
    value = value.strip()
    if value.lower() in ("true", "false"):
        return int(value.lower() == "true")
    try:
        return int(value)
    except ValueError:
        return value


def class_label(value, where: str, field: str, setting):
    """`value` if it can be a class label (a string, int or bool, or a whole-number float), else one line
    naming where it is (a file and line or record) and the field."""
    if isinstance(value, (str, numbers.Integral)) or (isinstance(value, float) and value.is_integer()):
        return value
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    if isinstance(value, float):
        raise EvalError(
            f"{where}: field '{field}' holds the number {value}, not a class label: a regression task (such as "
            f"GLUE's STS-B) cannot be classified; pass a string, int or bool label per example, or set "
            f"{setting('label_field')} to the field that holds one"
        )
    raise EvalError(
        f"{where}: field '{field}' holds a {type(value).__name__} ({shown}), not a class label: pass a string, "
        f"int or bool label per example, or set {setting('label_field')} to the field that holds one"
    )


def has_text(values) -> bool:
    """Whether every text field of a record holds a non-empty string."""
    return all(isinstance(t, str) and t.strip() for t in values)


def text(values) -> Text:
    """An example's text from its text fields' values: the text, or the pair."""
    return values[0] if len(values) == 1 else tuple(values)


# ---------------------------------------------------------------------------------------- files
def read_labelled(
    path: str, text_fields: Sequence[str], label_field: str, setting=lambda key: f"eval.tasks.*.{key}"
) -> Iterator[tuple[Text, object]]:
    """(text or pair, label) rows of a .jsonl / .csv / .parquet file, a record at a time; rows with an empty text
    or label left out, a label that is not a class refused (see class_label)."""
    found = False
    keys = ["text_fields"] * 2 if len(text_fields) == 2 else ["text_field"]
    for where, values in records(path, [*text_fields, label_field], [*keys, "label_field"], setting):
        if has_text(values[:-1]) and values[-1] not in (None, ""):
            found = True
            yield text(values[:-1]), class_label(values[-1], where, label_field, setting)
    if not found:
        named = " and ".join(f"'{f}'" for f in [*text_fields, label_field])
        raise EvalError(f"{Path(path).expanduser()} has no examples with a non-empty {named}")
