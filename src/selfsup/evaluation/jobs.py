"""Generation jobs (GenerationJob): (source, target) text examples from a built-in job, files or a data set."""

from __future__ import annotations

from collections.abc import Sequence

from selfsup.data.config import TextSource
from selfsup.data.records import EvalError, check_count, records, unique
from selfsup.evaluation.builtin import continuation_examples, docstring_name_examples
from selfsup.evaluation.splits import SOURCES, hf_splits, split_files

GENERATION_JOBS = {"continuation": continuation_examples, "docstring_name": docstring_name_examples}


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
        examples_shown: int = 5,
        name: str = "job",
    ):
        self.text = TextSource.of(source, paths, hf_name, hf_config, data_files)  # where its examples are read
        self.job = job
        self.test_paths = list(test_paths or ())
        self.source_field, self.target_field, self.test_fraction = source_field, target_field, test_fraction
        self.train_split, self.test_split = train_split, test_split
        self.max_train_examples, self.max_test_examples = max_train_examples, max_test_examples
        self.found: tuple[int, int] | None = None  # (training, test) examples before the max_*_examples caps
        self.max_new_tokens = max_new_tokens
        # test examples kept with what the run and random-init write (evaluated.json, the console, the report, W&B),
        # the same ones for every run: drawn by the eval seed (eval.probe.seed)
        self.examples_shown = examples_shown
        self.name = name
        self._loaded: tuple[list, list] | None = None

    def setting(self, key: str) -> str:
        return f"eval.generation.{self.name}.{key}"

    def load(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(train, test), read once; raises EvalError for anything a user must fix."""
        if self._loaded is not None:
            return self._loaded
        if self.text.source not in SOURCES:
            raise EvalError(f"{self.setting('source')}={self.text.source} is unknown: use one of {', '.join(SOURCES)}")
        for key in ("max_train_examples", "max_test_examples"):
            check_count(self.setting(key), getattr(self, key), optional=True)
        check_count(self.setting("max_new_tokens"), self.max_new_tokens)
        check_count(self.setting("examples_shown"), self.examples_shown)
        if self.text.source == "builtin":
            if self.job not in GENERATION_JOBS:
                raise EvalError(
                    f"{self.setting('job')}={self.job} is not a built-in generation job: use one of "
                    f"{', '.join(GENERATION_JOBS)}, or source=text_files / hf_dataset for your own data"
                )
            made = GENERATION_JOBS[self.job](self.test_fraction)
            train = [(a, b) for a, b, in_test in made if not in_test]
            test = [(a, b) for a, b, in_test in made if in_test]
            self.found = len(train), len(test)
            train, test = train[: self.max_train_examples], test[: self.max_test_examples]
        elif self.text.source == "text_files":
            train, test = self._files()
        else:
            train, test = self._hf()
        train = unique(train, f"generation job {self.name}: training examples")
        test = unique(test, f"generation job {self.name}: test examples")
        if not train or not test:
            raise EvalError(
                f"generation job {self.name} has no {'training' if not train else 'test'} examples: add examples"
                + (f" or change {self.setting('test_fraction')}" if self.text.source == "text_files" else "")
            )
        self._loaded = train, test
        return self._loaded

    def _example(self, values: tuple, where: str) -> tuple[str, str]:
        from selfsup.evaluation.generation import normalize_answer

        for value, key in zip(values, ("source_field", "target_field")):
            field = getattr(self, key)
            if not isinstance(value, str) or not value.strip():
                what = "is empty" if value is None or isinstance(value, str) else f"holds {value!r:.40}, not text"
                raise EvalError(
                    f"{where}: field '{field}' {what}: every example needs a non-empty source and target text; "
                    f"fix or remove it, or set {self.setting(key)}"
                )
        if not normalize_answer(values[1]):  # exact match would count any prediction of no words as right
            raise EvalError(
                f"{where}: field '{self.target_field}' holds {values[1]!r:.40}, which is empty once normalised (lower "
                f"case, punctuation and the articles a/an/the removed, as exact match and F1 read it): every target "
                f"needs a word; fix or remove it"
            )
        return values[0], values[1]

    def _files(self) -> tuple[list, list]:
        if not self.text.paths:
            raise EvalError(
                f"{self.setting('paths')} is empty: list .jsonl/.csv/.parquet files with '{self.source_field}' and "
                f"'{self.target_field}' fields"
            )
        keys = ["source_field", "target_field"]

        def rows(paths, setting):
            for path in paths:
                for where, values in records(path, [self.source_field, self.target_field], keys, setting):
                    yield self._example(values, where)

        return split_files(self, rows, lambda row: row[0])

    def _hf(self) -> tuple[list, list]:
        if not self.text.hf_name:
            raise EvalError(
                f"{self.setting('hf_name')} is not set: name a data set (e.g. xsum with source_field=document, "
                f"target_field=summary)"
            )
        fields = [self.source_field, self.target_field]
        return hf_splits(self, fields, ["source_field", "target_field"], self._example)
