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
refused); examples with an empty text or label are left out. `max_train_examples` / `max_test_examples` keep at most that many examples: of the
built-in task the first ones (a sentence and its change stay together), of files and data sets a uniform
random sample in their order (reservoir sampling with a fixed seed: the same files give the same sample;
of files only the sample is held). Every problem is one line (an EvalError) before any training starts.
"""

from __future__ import annotations

import functools
import itertools
import numbers
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from selfsup.data.builtin import builtin_documents, stdlib_docstrings
from selfsup.data.records import EvalError, check_count, hf_rows, records, unique
from selfsup.data.sources import document_bucket

BUILTIN_TASKS = ("replaced_word", "word_order", "next_sentence")
PAIR_TASKS = ("next_sentence",)  # built-in tasks of sentence pairs
SOURCES = ("builtin", "text_files", "hf_dataset")

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
        self.source, self.task, self.perturb = source, task, perturb
        self.paths, self.test_paths = list(paths or ()), list(test_paths or ())
        self.text_field, self.label_field, self.test_fraction = text_field, label_field, test_fraction
        self.text_fields = list(text_fields) if text_fields else None
        self.hf_name, self.hf_config, self.data_files = hf_name, hf_config, data_files
        self.train_split, self.test_split = train_split, test_split
        self.max_train_examples, self.max_test_examples = max_train_examples, max_test_examples
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
        return len(self.fields) == 2 if self.source != "builtin" else self.task in PAIR_TASKS

    # ------------------------------------------------------------------------------------ loading
    def load(self) -> tuple[Examples, Examples]:
        """(train, test), read once; raises EvalError for anything a user must fix."""
        if self._loaded is not None:
            return self._loaded
        if self.source not in SOURCES:
            raise EvalError(f"{self.setting('source')}={self.source} is unknown: use one of {', '.join(SOURCES)}")
        check_count(self.setting("max_train_examples"), self.max_train_examples, optional=True)
        check_count(self.setting("max_test_examples"), self.max_test_examples, optional=True)
        if not 1 <= len(self.fields) <= 2 or not all(isinstance(f, str) and f for f in self.fields):
            raise EvalError(
                f"{self.setting('text_fields')}={self.text_fields} must name one or two fields (a text, or a "
                f"sentence pair such as [premise, hypothesis])"
            )
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
        if self.task in PAIR_TASKS:
            examples = next_sentence_examples(self.test_fraction)
            train = [(pair, y) for pair, y, _, in_test in examples if not in_test]
            test = [(pair, y) for pair, y, _, in_test in examples if in_test]
            return train[: self.max_train_examples], test[: self.max_test_examples]
        check_count(self.setting("perturb"), self.perturb)  # words changed per sentence
        examples = builtin_examples(self.task, self.perturb)
        cut = 2 * int(len(examples) / 2 * (1 - self.test_fraction))  # a sentence and its change: one split
        return list(examples[:cut][: self.max_train_examples]), list(examples[cut:][: self.max_test_examples])

    def _files(self) -> tuple[list, list]:
        if not self.paths:
            fields = ", ".join(f"'{f}'" for f in self.fields)
            raise EvalError(
                f"{self.setting('paths')} is empty: list .jsonl/.csv/.parquet files with "
                f"{fields} and '{self.label_field}' fields"
            )

        def rows(paths):
            return (r for p in paths for r in read_labelled(p, self.fields, self.label_field, self.setting))

        return split_files(self, rows, lambda row: "\n".join(parts(row[0])))

    def _hf(self) -> tuple[list, list]:
        if not self.hf_name:
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


class GenerationJob:
    """A generation job (selfsup.evaluation.generation): (source, target) text examples split into train and test;
    `load()` -> (train, test), each a list of (source, target). From one of the lab's sources:

    - `source=builtin`: `job=continuation` (a held-out sentence's first half of words -> the rest:
      continuation_examples) or `job=docstring_name` (a held-out docstring's first sentence -> the words of the name
      it documents: docstring_name_examples);
    - `source=text_files`: `.jsonl` / `.csv` / `.parquet` files with `source_field` and `target_field` (e.g. a
      summarisation set's `document` / `summary`), test examples from `test_paths`, else a deterministic
      `test_fraction`;
    - `source=hf_dataset`: `datasets.load_dataset(hf_name, hf_config)`'s `train_split` and `test_split`.

    A record whose source or target is missing, empty or not text is refused in one line. `max_new_tokens`: the
    most tokens greedy decoding writes per example."""

    def __init__(
        self,
        source: str = "builtin",
        job: str = "continuation",
        paths: Sequence[str] = (),
        test_paths: Sequence[str] = (),
        source_field: str = "source",
        target_field: str = "target",
        test_fraction: float = 0.2,
        hf_name: str | None = None,
        hf_config: str | None = None,
        data_files=None,
        train_split: str = "train",
        test_split: str = "validation",
        max_train_examples: int | None = 2000,
        max_test_examples: int | None = 500,
        max_new_tokens: int = 24,
        name: str = "job",
    ):
        self.source, self.job = source, job
        self.paths, self.test_paths = list(paths or ()), list(test_paths or ())
        self.source_field, self.target_field, self.test_fraction = source_field, target_field, test_fraction
        self.hf_name, self.hf_config, self.data_files = hf_name, hf_config, data_files
        self.train_split, self.test_split = train_split, test_split
        self.max_train_examples, self.max_test_examples = max_train_examples, max_test_examples
        self.max_new_tokens = max_new_tokens
        self.name = name
        self._loaded: tuple[list, list] | None = None

    def setting(self, key: str) -> str:
        return f"eval.generation.{self.name}.{key}"

    def load(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(train, test), read once; raises EvalError for anything a user must fix."""
        if self._loaded is not None:
            return self._loaded
        if self.source not in SOURCES:
            raise EvalError(f"{self.setting('source')}={self.source} is unknown: use one of {', '.join(SOURCES)}")
        for key in ("max_train_examples", "max_test_examples"):
            check_count(self.setting(key), getattr(self, key), optional=True)
        check_count(self.setting("max_new_tokens"), self.max_new_tokens)
        if self.source == "builtin":
            if self.job not in GENERATION_JOBS:
                raise EvalError(
                    f"{self.setting('job')}={self.job} is not a built-in generation job: use one of "
                    f"{', '.join(GENERATION_JOBS)}, or source=text_files / hf_dataset for your own data"
                )
            made = GENERATION_JOBS[self.job](self.test_fraction)
            train = [(a, b) for a, b, in_test in made if not in_test][: self.max_train_examples]
            test = [(a, b) for a, b, in_test in made if in_test][: self.max_test_examples]
        elif self.source == "text_files":
            train, test = self._files()
        else:
            train, test = self._hf()
        train = unique(train, f"generation job {self.name}: training examples")
        test = unique(test, f"generation job {self.name}: test examples")
        if not train or not test:
            raise EvalError(
                f"generation job {self.name} has no {'training' if not train else 'test'} examples: add examples"
                + (f" or change {self.setting('test_fraction')}" if self.source == "text_files" else "")
            )
        self._loaded = train, test
        return self._loaded

    def _example(self, values: tuple, where: str) -> tuple[str, str]:
        for value, key in zip(values, ("source_field", "target_field")):
            field = getattr(self, key)
            if not isinstance(value, str) or not value.strip():
                what = "is empty" if value is None or isinstance(value, str) else f"holds {value!r:.40}, not text"
                raise EvalError(
                    f"{where}: field '{field}' {what}: every example needs a non-empty source and target text; "
                    f"fix or remove it, or set {self.setting(key)}"
                )
        return values[0], values[1]

    def _files(self) -> tuple[list, list]:
        if not self.paths:
            raise EvalError(
                f"{self.setting('paths')} is empty: list .jsonl/.csv/.parquet files with '{self.source_field}' and "
                f"'{self.target_field}' fields"
            )
        keys = ["source_field", "target_field"]

        def rows(paths):
            for path in paths:
                for where, values in records(path, [self.source_field, self.target_field], keys, self.setting):
                    yield self._example(values, where)

        return split_files(self, rows, lambda row: row[0])

    def _hf(self) -> tuple[list, list]:
        if not self.hf_name:
            raise EvalError(
                f"{self.setting('hf_name')} is not set: name a data set (e.g. xsum with source_field=document, "
                f"target_field=summary)"
            )
        fields = [self.source_field, self.target_field]
        return hf_splits(self, fields, ["source_field", "target_field"], self._example)


def split_files(source, rows, key) -> tuple[list, list]:
    """(train, test) of a task's or job's files (its paths, test_paths, test_fraction, max_*_examples, setting):
    rows(paths) yields the examples; without test_paths, an example is a test one when the hash bucket of key(row)
    is below test_fraction. Each split a Reservoir sample."""
    train, test = Reservoir(source.max_train_examples), Reservoir(source.max_test_examples)
    if source.test_paths:
        train.extend(rows(source.paths))
        test.extend(rows(source.test_paths))
    else:
        if not 0 < source.test_fraction < 1:
            raise EvalError(f"{source.setting('test_fraction')}={source.test_fraction} must be between 0 and 1")
        threshold = source.test_fraction * 10_000
        for row in rows(source.paths):
            (test if document_bucket(key(row)) < threshold else train).add(row)
    return train.rows(), test.rows()


def hf_splits(source, fields: list[str], keys: list[str], example) -> tuple[list, list]:
    """(train, test) of a task's or job's `datasets` splits (its hf_name, hf_config, data_files, train_split,
    test_split, max_*_examples, setting): example(values of `fields`, where) makes an example of a row (None: left
    out). Each split a Reservoir sample."""
    out = []
    for split, limit in (
        (source.train_split, source.max_train_examples),
        (source.test_split, source.max_test_examples),
    ):
        rows = hf_rows(source.hf_name, source.hf_config, split, source.data_files, fields, keys, source.setting)
        kept = Reservoir(limit)
        made = (example(row, f"{source.hf_name} split {split} row {i}") for i, row in enumerate(rows, start=1))
        kept.extend(e for e in made if e is not None)
        out.append(kept.rows())
    return out[0], out[1]


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


@functools.cache
def continuation_examples(test_fraction: float = 0.2) -> tuple[tuple[str, str, bool], ...]:
    """(source, target, in the test split): the built-in open-ended generation job. Each probe sentence (held out:
    no built-in corpus document holds it) cut after its first half of words (the shorter half when odd): the
    source, the rest: the target; a sentence whose rest occurs verbatim in the built-in corpus is left out, so no
    target was seen in pretraining. Split by sentence (its hash bucket below test_fraction: test). Deterministic."""
    text = " ".join(" ".join(doc.split()) for doc in builtin_documents())
    examples = []
    for sentence in probe_sentences():
        words = sentence.split()
        source, target = " ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2 :])
        if target not in text:
            examples.append((source, target, document_bucket(sentence) < test_fraction * 10_000))
    return tuple(examples)


def name_words(name: str) -> str:
    """The words of a Python name, lower case: `_get_help_string` -> 'get help string', `ArgumentTypeError` ->
    'argument type error', `setLevel` -> 'set level'."""
    parts = []
    for chunk in name.strip("_").split("_"):
        parts += re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+", chunk)
    return " ".join(p.lower() for p in parts)


@functools.cache
def docstring_name_examples(test_fraction: float = 0.2) -> tuple[tuple[str, str, bool], ...]:
    """(source, target, in the test split): the built-in input -> output job. The source: the first sentence of a
    held-out standard-library docstring (a probe sentence: no built-in corpus document holds it); the target: the
    words of the name it documents (name_words). Left out: dunder names (the same `__repr__` under many texts),
    names the built-in corpus holds as a word (public names its module texts mention), and sources that hold the
    name or its words (a signature line such as `error(message)`), so the pairing was never seen in pretraining and
    the target is never copied from the source. Each source once (its first name). Split by source (its hash
    bucket below test_fraction: test). Deterministic."""
    text = " ".join(" ".join(doc.split()) for doc in builtin_documents())
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    held, found = set(probe_sentences()), {}
    gathered = stdlib_docstrings()
    for doc, name in zip(gathered["held_out"], gathered["held_out_names"]):
        first = sentences(doc)[:1]
        target = name_words(name)
        if (
            not first
            or first[0] not in held
            or not target
            or (name.startswith("__") and name.endswith("__"))
            or name in words
            or name.lower() in first[0].lower()
            or target in first[0].lower()
        ):
            continue
        found.setdefault(first[0], target)
    return tuple((s, t, document_bucket(s) < test_fraction * 10_000) for s, t in found.items())


@functools.cache
def next_sentence_examples(test_fraction: float = 0.2) -> tuple[tuple[tuple[str, str], int, str, bool], ...]:
    """((sentence A, sentence B), label, the docstring's first 200 characters, in the test split) for each two
    neighbouring sentences of a held-out docstring (both among probe_sentences: never in the built-in corpus; each
    A once, each B once). The docstrings are split first (a docstring's hash bucket below test_fraction: test); within each
    split, in docstring order, every other pair keeps B, the true next sentence (label 1), and the others (label 0)
    take as B the true next sentence of another of the split's label-0 pairs, from another docstring, of the nearest
    word count (the first unused in a fixed shuffled order). So every sentence is a B at most once and only in its
    own split: neither a B's identity nor its length tells the label. Deterministic."""
    held = set(probe_sentences())
    found: dict[bool, list] = {False: [], True: []}  # split -> [(a, b, docstring key, docstring index)]
    firsts, seconds = set(), set()  # each sentence an A once and a B once (docstrings repeat sentences)
    for d, doc in enumerate(stdlib_docstrings()["held_out"]):
        in_test = document_bucket(doc[:200]) < test_fraction * 10_000
        for a, b in itertools.pairwise(sentences(doc)):
            if a in held and b in held and a not in firsts and b not in seconds:
                firsts.add(a)
                seconds.add(b)
                found[in_test].append((a, b, doc[:200], d))
    examples = []
    for in_test, pairs in found.items():
        negatives = pairs[1::2]
        pool = [(b, d) for _, b, _, d in negatives]
        random.Random(2).shuffle(pool)
        by_length: dict[int, list[tuple[str, int]]] = {}
        for b, d in pool:
            by_length.setdefault(len(b.split()), []).append((b, d))
        for i, (a, b, key, d) in enumerate(pairs):
            if i % 2 == 0:
                examples.append(((a, b), 1, key, in_test))
                continue
            words = len(b.split())
            for length in sorted(by_length, key=lambda n: (abs(n - words), n)):
                other = next((x for x in by_length[length] if x[1] != d and x[0] != a), None)
                if other is not None:
                    by_length[length].remove(other)
                    examples.append(((a, other[0]), 0, key, in_test))
                    break
    return tuple(examples)


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


GENERATION_JOBS = {"continuation": continuation_examples, "docstring_name": docstring_name_examples}
