"""The sets of minimal pairs: the built-in set (builtin_pairs) and user sets in BLiMP's layout (PairSource)."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from selfsup.data.config import TextSource
from selfsup.data.records import EvalError, check_count, hf_rows, read_records, unique
from selfsup.evaluation.builtin import PLAIN, perturb_words, probe_sentences

PAIR_TYPES = ("swap_1", "replaced_1", "replaced_4")
MAX_WORDS = 12  # built-in pairs: sentences of 6 to 12 words (a pseudo-log-likelihood costs length^2)
# built-in pairs of each type: 800 (2,400 in all) keep the main job's evaluation within 20% of its time; beside 1,000,
# its margins' intervals are at most 22% wider and its verdict the same (docs/evaluation.md, "Cost")
MAX_PAIRS = 800


# ------------------------------------------------------------------------------------------ pair sets
@dataclass
class PairSet:
    """good[i] and bad[i] are pair i; groups[i] its group (the built-in set: its type; BLiMP: its UID); kept:
    the pairs a run scores (MinimalPairs.setup leaves out those longer than the model's positions)."""

    name: str
    good: list[str]
    bad: list[str]
    groups: list[str] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.good)


def builtin_pairs(max_pairs: int = MAX_PAIRS, types: Sequence[str] = PAIR_TYPES, max_words: int = MAX_WORDS) -> PairSet:
    """Up to max_pairs pairs of each type from the probe's held-out sentences of at most max_words words
    (never in the built-in pretraining corpus), deterministic. A type's sentences are the first that type
    can corrupt, so the types share most good sentences (each is scored once)."""
    for kind in types:
        if kind not in PAIR_TYPES:
            raise EvalError(f"eval.pairs.types: {kind!r} is not a built-in pair type: use {', '.join(PAIR_TYPES)}")
    found = [s for s in probe_sentences() if len(s.split()) <= max_words]
    vocabulary = [w for s in found for w in s.split() if PLAIN.match(w)]
    good, bad, groups = [], [], []
    for kind in types:
        name, count = kind.rsplit("_", 1)
        rng = random.Random(f"pairs/{kind}")
        taken = 0
        for sentence in found:
            changed = perturb_words(
                sentence.split(),
                "word_order" if name == "swap" else "replaced_word",
                int(count),
                rng,
                vocabulary,
                exact=True,
            )
            if changed is None or " ".join(changed) == sentence:
                continue
            good.append(sentence)
            bad.append(" ".join(changed))
            groups.append(kind)
            taken += 1
            if taken == max_pairs:
                break
    return PairSet("builtin", good, bad, groups)


# ------------------------------------------------------------------------------------------ user sets
RESERVED = {*PAIR_TYPES, "denoise", "accuracy", "builtin"}
GROUP_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


class PairSource:
    """A user set of minimal pairs in BLiMP's layout: one record per pair with a good and a bad sentence and,
    optionally, a group (BLiMP's `UID`) reported on its own. From .jsonl / .csv / .parquet files
    (`source=text_files`, `paths`) or a Hugging Face data set (`source=hf_dataset`, `hf_name`, `hf_config`,
    `split`, `data_files`), at most `max_pairs` of them (the first)."""

    def __init__(
        self,
        source: str = "text_files",
        paths: Sequence[str] = (),
        hf_name: str | None = None,
        hf_config: str | None = None,
        split: str = "train",
        data_files=None,
        good_field: str = "sentence_good",
        bad_field: str = "sentence_bad",
        group_field: str | None = None,
        max_pairs: int | None = None,
        name: str = "pairs",
    ):
        self.text = TextSource.of(source, paths, hf_name, hf_config, data_files)  # where its pairs are read
        self.split = split
        self.good_field, self.bad_field, self.group_field = good_field, bad_field, group_field
        self.max_pairs, self.name = max_pairs, name
        self._loaded: PairSet | None = None

    def setting(self, key: str) -> str:
        return f"eval.pairs.sets.{self.name}.{key}"

    def load(self) -> PairSet:
        """The set, read once; EvalError (one line) for anything a user must fix."""
        if self._loaded is not None:
            return self._loaded
        if self.name in RESERVED or GROUP_CHARS.search(self.name):
            raise EvalError(
                f"eval.pairs.sets.{self.name}: the name must be letters, digits, '_', '.' or '-' and "
                f"not one of {', '.join(sorted(RESERVED))} (it names the metrics eval/pairs/<name>/...)"
            )
        check_count(self.setting("max_pairs"), self.max_pairs, optional=True)
        fields = [self.good_field, self.bad_field] + ([self.group_field] if self.group_field else [])
        keys = ["good_field", "bad_field", "group_field"]
        if self.text.source == "text_files":
            if not self.text.paths:
                raise EvalError(
                    f"{self.setting('paths')} is empty: list .jsonl/.csv/.parquet files with "
                    f"'{self.good_field}' and '{self.bad_field}' fields"
                )
            rows = [r for p in self.text.paths for r in read_records(p, fields, keys, self.setting)]
        elif self.text.source == "hf_dataset":
            if not self.text.hf_name:
                raise EvalError(
                    f"{self.setting('hf_name')} is not set: name a data set (e.g. blimp with "
                    f"hf_config=anaphor_gender_agreement)"
                )
            rows = hf_rows(self.text, self.split, fields, keys, self.setting)
        else:
            raise EvalError(f"{self.setting('source')}={self.text.source} is unknown: use text_files or hf_dataset")
        rows = unique(rows, f"eval.pairs.sets.{self.name}: pairs")
        rows = rows[: self.max_pairs] if self.max_pairs is not None else rows
        if not rows:
            raise EvalError(
                f"eval.pairs.sets.{self.name} has no pairs: add records with '{self.good_field}' and '{self.bad_field}'"
            )
        good, bad, groups = [], [], []
        for i, row in enumerate(rows, start=1):
            g, b = row[0], row[1]
            if not (isinstance(g, str) and g.strip() and isinstance(b, str) and b.strip()):
                raise EvalError(
                    f"eval.pairs.sets.{self.name}: pair {i} has an empty or non-text sentence "
                    f"({g!r}, {b!r}): every pair needs two sentences"
                )
            if " ".join(g.split()) == " ".join(b.split()):
                raise EvalError(
                    f"eval.pairs.sets.{self.name}: pair {i} has the same good and bad sentence "
                    f"({g[:40]!r}): a minimal pair differs; fix or drop it"
                )
            good.append(g)
            bad.append(b)
            groups.append(GROUP_CHARS.sub("_", str(row[2])) if self.group_field else "")
        self._loaded = PairSet(self.name, good, bad, groups if self.group_field else [])
        return self._loaded
