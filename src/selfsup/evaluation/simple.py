"""The simple baselines a reviewer asks for first, beside every margin. A task's: TF-IDF features of its texts and
a logistic regression (scikit-learn's TfidfVectorizer and LogisticRegression; a sentence-pair task's features are
each text's TF-IDF, their product (the words both share, weighted) and their word overlap). A generation job's:
copying the input, and writing the most frequent training target, each scored by exact match and token F1. They
read no model: the same for every run of a sweep, so each run is compared with them on the same test examples
(`vs_<baseline>`: the run's score minus the baseline's, paired bootstrap 95% interval)."""

from __future__ import annotations

import hashlib

import numpy as np

from selfsup.evaluation.tasks import Examples, parts

NAME = "TF-IDF + logistic regression"
SIMPLE = {"tfidf": NAME, "copy": "copying the input", "frequent": "the most frequent training target"}
WRITTEN = ("copy", "frequent")  # a generation job's, on its exact match and token F1


def _overlap(first: list[str], second: list[str]) -> np.ndarray:
    """Per pair: the Jaccard overlap of the two texts' word sets, the share of each text's words in the other."""
    rows = []
    for a, b in zip(first, second):
        x, y = set(a.lower().split()), set(b.lower().split())
        both = len(x & y)
        rows.append([both / max(1, len(x | y)), both / max(1, len(x)), both / max(1, len(y))])
    return np.asarray(rows, dtype=np.float64)


def simple_key(examples_hash: str) -> str:
    """The cache key of a task's baseline predictions: its examples (their hash) and this baseline's settings."""
    import sklearn

    how = f"{examples_hash} tfidf sublinear 1-2grams 50000; pairs: each, product, overlap; logreg 1000; {sklearn.__version__}"
    return hashlib.sha256(how.encode()).hexdigest()


def tfidf_predictions(train: Examples, test: Examples) -> np.ndarray:
    """The class the baseline predicts for each test example, fitted on the training examples."""
    from scipy.sparse import csr_matrix, hstack
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    if len(set(train.labels)) < 2:  # one class to learn: the baseline answers it
        return np.full(len(test), train.labels[0] if train.labels else 0)
    vectorizer = TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2), max_features=50_000)
    pair = any(len(parts(t)) > 1 for t in train.texts)
    if not pair:
        x_train = vectorizer.fit_transform([parts(t)[0] for t in train.texts])
        x_test = vectorizer.transform([parts(t)[0] for t in test.texts])
    else:
        vectorizer.fit([p for t in train.texts for p in parts(t)])

        def featurise(examples: Examples):
            first = [parts(t)[0] for t in examples.texts]
            second = [parts(t)[-1] for t in examples.texts]
            a, b = vectorizer.transform(first), vectorizer.transform(second)
            return hstack([a, b, a.multiply(b), csr_matrix(_overlap(first, second))]).tocsr()

        x_train, x_test = featurise(train), featurise(test)
    classifier = LogisticRegression(max_iter=1000)
    classifier.fit(x_train, np.asarray(train.labels))
    return classifier.predict(x_test)


def written_outcomes(sources: list[str], references: list[str], targets: list[str]) -> dict[str, dict]:
    """A generation job's simple baselines per test example: {baseline: {exact_match: [n], token_f1: [n]}}, copying
    each test source, and writing the most frequent of the training targets (`targets`; the first of a tie)."""
    from collections import Counter

    from selfsup.evaluation.generation import exact_match, token_f1

    top = Counter(targets).most_common(1)[0][0] if targets else ""
    written = {"copy": sources, "frequent": [top] * len(references)}
    return {
        b: {s: np.asarray([f(p, r) for p, r in zip(out, references)], dtype=np.float64) for s, f in SCORED}
        for b, out in written.items()
        for SCORED in [(("exact_match", exact_match), ("token_f1", token_f1))]
    }
