"""The built-in tasks' and generation jobs' examples, made of held-out standard-library docstring sentences."""

from __future__ import annotations

import functools
import itertools
import random
import re
from collections.abc import Sequence

from selfsup.data.builtin import builtin_documents, stdlib_docstrings
from selfsup.data.sources import document_bucket

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
