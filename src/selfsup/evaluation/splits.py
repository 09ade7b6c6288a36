"""Reading a task's or generation job's examples into train and test splits, each a Reservoir sample."""

from __future__ import annotations

import random
from collections.abc import Iterable

from selfsup.data.records import EvalError, hf_rows
from selfsup.data.sources import document_bucket

SOURCES = ("builtin", "text_files", "hf_dataset")


def split_files(source, rows, key) -> tuple[list, list]:
    """(train, test) of a task's or job's files (its paths, test_paths, test_fraction, max_*_examples, setting):
    rows(paths, setting) yields the examples of the files, `setting` naming the key that listed them (paths, or
    test_paths for the test files); without test_paths, an example is a test one when the hash bucket of key(row)
    is below test_fraction. Each split a Reservoir sample; source.found: the examples each split had before it."""
    train, test = Reservoir(source.max_train_examples), Reservoir(source.max_test_examples)
    if source.test_paths:
        train.extend(rows(source.text.paths, source.setting))
        test.extend(rows(source.test_paths, lambda k: source.setting("test_paths" if k == "paths" else k)))
    else:
        if not 0 < source.test_fraction < 1:
            raise EvalError(f"{source.setting('test_fraction')}={source.test_fraction} must be between 0 and 1")
        threshold = source.test_fraction * 10_000
        for row in rows(source.text.paths, source.setting):
            (test if document_bucket(key(row)) < threshold else train).add(row)
    source.found = train.seen, test.seen
    return train.rows(), test.rows()


def hf_splits(source, fields: list[str], keys: list[str], example) -> tuple[list, list]:
    """(train, test) of a task's or job's `datasets` splits (its text's hf_name, hf_config, data_files, its train_split,
    test_split, max_*_examples, setting): example(values of `fields`, where) makes an example of a row (None: left
    out). Each split a Reservoir sample; source.found: the examples each split had before it."""
    out, seen = [], []
    for split, limit in (
        (source.train_split, source.max_train_examples),
        (source.test_split, source.max_test_examples),
    ):
        rows = hf_rows(source.text, split, fields, keys, source.setting)
        kept = Reservoir(limit)
        made = (example(row, f"{source.text.hf_name} split {split} row {i}") for i, row in enumerate(rows, start=1))
        kept.extend(e for e in made if e is not None)
        out.append(kept.rows())
        seen.append(kept.seen)
    source.found = seen[0], seen[1]
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


def held_out(what: str, items: str, role: str, texts: Iterable[str], training_documents) -> None:
    """Refuse (EvalError) a task's or job's texts that are documents of the pretraining data: `role` must be held
    out from pretraining."""
    inside = [t for t in texts if t in training_documents] if training_documents else []
    if inside:
        raise EvalError(
            f"{what}: {len(inside)} of its {items} are documents of the pretraining data (e.g. {inside[0][:40]!r}): "
            f"{role} must be held out from pretraining; use other examples or other data.paths"
        )
