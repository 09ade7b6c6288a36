"""Faults of user probe tasks (source=text_files): unseen test labels, the example cap on a file sorted by
label (a uniform, deterministic sample, read without holding the file), labels that are not classes,
quoted newlines in CSV."""

import math
import tracemalloc
from collections import Counter

import pytest
from helpers import write_records

from selfsup.evaluation import EvalError, Task


def write(path, rows, fmt=None):
    return write_records(path, rows, fmt, row_group_size=1000)


def task(paths, **settings):
    return Task(source="text_files", paths=list(paths), name="t", **settings)


# ---------------------------------------------------------------------------------------- unseen test labels
def test_a_test_label_that_never_occurs_in_training_is_refused(tmp_path):
    train = write(tmp_path / "train.jsonl", [{"text": f"train {i}", "label": "ab"[i % 2]} for i in range(20)])
    test = write(tmp_path / "test.jsonl", [{"text": f"test {i}", "label": "abc"[i % 3]} for i in range(9)])
    with pytest.raises(EvalError) as err:
        task([train], test_paths=[test]).load()
    assert str(err.value) == (
        "task t: test labels 'c' never occur in training, whose labels are 'a', 'b': the probe cannot predict them; "
        "fix the labels or the split"
    )


def test_a_task_whose_training_labels_are_one_class_names_the_test_labels(tmp_path):
    train = write(tmp_path / "train.jsonl", [{"text": f"train {i}", "label": 0} for i in range(20)])
    test = write(tmp_path / "test.jsonl", [{"text": f"test {i}", "label": i % 2} for i in range(10)])
    with pytest.raises(EvalError, match=r"test labels 1 never occur in training, whose labels are 0: "):
        task([train], test_paths=[test]).load()


def test_labels_equal_as_values_are_one_class_whatever_their_type(tmp_path, capsys):
    """0/1 in a .jsonl beside "0"/"1" in a CSV (or strings, floats and bools in one file) were a 4-class task whose
    accuracy, majority and random-init all read 0.000."""
    rows = [{"text": f"train {i}", "label": [0, 1, "0", 1.0][i % 4]} for i in range(40)]
    train = write(tmp_path / "train.jsonl", rows)
    test = write(
        tmp_path / "test.csv", [{"text": f"test {i}", "label": ["0", "1", "true", "False"][i % 4]} for i in range(20)]
    )
    t = task([train], test_paths=[test])
    train_examples, test_examples = t.load()
    assert t.classes == ["0", "1"]
    assert train_examples.labels == [0, 1, 0, 1] * 10 and test_examples.labels == [0, 1, 1, 0] * 5
    said = [line for line in capsys.readouterr().err.splitlines() if "one class" in line]
    assert said == [
        "warning: task t: labels written differently read as one class each: '0' and 'False' and 0; '1' and "
        "'true' and 1 and 1.0"
    ]


def test_test_examples_that_repeat_training_texts_are_counted_in_one_line(tmp_path, capsys):
    train = write(tmp_path / "train.jsonl", [{"text": f"text {i}", "label": i % 2} for i in range(40)])
    test = write(tmp_path / "test.jsonl", [{"text": f"text {i}", "label": i % 2} for i in range(30, 50)])
    _, test_examples = task([train], test_paths=[test]).load()
    assert len(test_examples) == 20  # scored as they are
    assert (
        "warning: task t: 10 of 20 test examples repeat a training example's text: they are scored as they are "
        "(remove them from the test split for a clean test)"
    ) in capsys.readouterr().err.splitlines()


# ---------------------------------------------------------------------------------------- the example cap
def within_4_sigma(counts, labels, n, shares):
    for label, share in zip(labels, shares):
        sigma = math.sqrt(n * share * (1 - share))
        assert abs(counts[label] - n * share) <= 4 * sigma, (label, counts, n * share, sigma)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_the_cap_keeps_a_uniform_sample_of_a_file_sorted_by_label(tmp_path, fmt):
    rows = [{"text": f"example {label} number {i}", "label": label} for label in "abc" for i in range(1000)]
    path = write(tmp_path / f"sorted.{fmt}", rows)
    train, test = task([path], max_train_examples=300, max_test_examples=60).load()
    t = task([path], max_train_examples=300, max_test_examples=60)
    assert (len(train), len(test)) == (300, 60)
    for examples in (train, test):
        counts = Counter("abc"[y] for y in examples.labels)
        within_4_sigma(counts, "abc", len(examples), [1 / 3] * 3)
        assert all(text.split()[1] == "abc"[y] for text, y in zip(examples.texts, examples.labels))
    assert set(train.texts).isdisjoint(test.texts)
    again = t.load()  # the same file gives the same sample
    assert (again[0].texts, again[0].labels, again[1].texts) == (train.texts, train.labels, test.texts)


def test_the_cap_on_test_paths_and_uneven_classes(tmp_path):
    rows = [
        {"text": f"train {label} {i}", "label": label}
        for label, n in (("x", 600), ("y", 300), ("z", 100))
        for i in range(n)
    ]
    test_rows = [{"text": f"test {label} {i}", "label": label} for label in "xyz" for i in range(200)]
    train, test = task(
        [write(tmp_path / "train.jsonl", rows)],
        test_paths=[write(tmp_path / "test.jsonl", test_rows)],
        max_train_examples=200,
        max_test_examples=90,
    ).load()
    assert (len(train), len(test)) == (200, 90)
    within_4_sigma(Counter(train.labels), [0, 1, 2], 200, [0.6, 0.3, 0.1])
    within_4_sigma(Counter(test.labels), [0, 1, 2], 90, [1 / 3] * 3)


def test_without_a_cap_every_example_is_kept_in_file_order(tmp_path):
    rows = [{"text": f"example {i}", "label": i % 2} for i in range(50)]
    path = write(tmp_path / "t.jsonl", rows)
    test = write(tmp_path / "test.jsonl", rows[:10])
    train, _ = task([path], test_paths=[test], max_train_examples=50).load()
    assert train.texts == [r["text"] for r in rows] and train.labels == [r["label"] for r in rows]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_a_task_file_of_20_mb_of_text_is_read_without_holding_it(tmp_path, fmt):
    text = "the quick brown fox jumps over a lazy dog while seven wizards quietly box jumping frogs " * 12
    rows = [{"text": f"{i} {text}", "label": i % 3} for i in range(20_000)]
    path = write(tmp_path / f"big.{fmt}", rows)
    tracemalloc.start()
    try:
        train, test = task([path], max_train_examples=200, max_test_examples=50).load()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (len(train), len(test)) == (200, 50)
    assert peak < 5e6, f"peak {peak / 1e6:.1f} MB of Python memory to read 20 MB of text"  # all of it: > 25 MB


# ---------------------------------------------------------------------------------------- labels that are not classes
@pytest.mark.parametrize(
    "label,kind", [([1, 2], "a list"), ({"a": 1}, "a dict"), (0.5, "the number 0.5"), (float("nan"), "the number nan")]
)
def test_a_label_that_is_not_a_class_is_one_line(tmp_path, label, kind):
    rows = [{"text": f"text {i}", "label": i % 2} for i in range(20)] + [{"text": "odd one", "label": label}]
    path = write(tmp_path / "t.jsonl", rows)
    with pytest.raises(EvalError) as err:
        task([path]).load()
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}:21: field 'label' holds {kind}")
    assert "a string, int or bool label" in message and "eval.tasks.t.label_field" in message


def test_a_parquet_list_label_column_is_one_line(tmp_path):
    path = write(tmp_path / "t.parquet", [{"text": f"text {i}", "label": [i % 2, 1]} for i in range(20)])
    with pytest.raises(EvalError) as err:
        task([path]).load()
    assert str(err.value).startswith(f"{path}: record 1: field 'label' holds a list")
    assert "\n" not in str(err.value)


def test_null_labels_are_left_out_and_whole_number_floats_are_classes(tmp_path):
    rows = [{"text": f"text {i}", "label": [0.0, 1.0, None][i % 3]} for i in range(300)]
    path = write(tmp_path / "t.jsonl", rows)
    t = task([path])
    train, test = t.load()
    assert len(train) + len(test) == 200 and t.classes == ["0.0", "1.0"]


# ---------------------------------------------------------------------------------------- CSV quoting
def test_quoted_newlines_in_a_csv_task_stay_in_the_text(tmp_path):
    rows = [{"text": f"first line {i}\nsecond line", "label": i % 2} for i in range(30)]
    rows += [{"text": f'windows {i}\r\nline, with "quotes"', "label": i % 2} for i in range(30)]
    path = write(tmp_path / "t.csv", rows)
    t = task([path], test_paths=[path])
    train, test = t.load()
    assert train.texts == [r["text"] for r in rows] and test.texts == train.texts
    assert train.labels == [r["label"] for r in rows] and t.classes == ["0", "1"]


@pytest.mark.parametrize("value", [-1, 0, 2.5, True, "10"])
def test_a_count_setting_below_1_or_not_a_whole_number_is_refused(tmp_path, value):
    """max_pairs: -1 used to drop the last pair silently (a slice); every count is a whole number >= 1 or null."""
    from selfsup.evaluation import MinimalPairs, PairSource

    path = write(tmp_path / "pairs.jsonl", [{"sentence_good": "a cat sat .", "sentence_bad": "a cat sit ."}] * 3)
    with pytest.raises(EvalError, match=rf"^eval.pairs.sets.mine.max_pairs={value} must be at least 1 \(a whole"):
        MinimalPairs(builtin=False, sets={"mine": PairSource(paths=[str(path)], max_pairs=value)}).check()
    with pytest.raises(EvalError, match=rf"^eval.pairs.random_init_seeds={value} must be at least 1"):
        MinimalPairs(random_init_seeds=value).check()
    task = Task(source="text_files", paths=[str(path)], max_test_examples=value, name="t")
    with pytest.raises(EvalError, match=rf"^eval.tasks.t.max_test_examples={value} must be at least 1 .*or null"):
        task.load()


def test_repeated_examples_and_pairs_are_dropped_with_one_warning(tmp_path, capsys):
    """One pair repeated 200 times made a 3-step model "show pretraining": repeats are not independent examples."""
    from selfsup.evaluation import PairSource

    pairs = [{"sentence_good": f"the cat {i} sat .", "sentence_bad": f"the cat {i} sit ."} for i in range(5)]
    source = PairSource(paths=[str(write(tmp_path / "pairs.jsonl", pairs + [pairs[0]] * 200))], name="mine")
    assert len(source.load()) == 5
    rows = [{"text": f"example number {i}", "label": i % 2} for i in range(40)]
    task = Task(source="text_files", paths=[str(write(tmp_path / "t.jsonl", rows + rows[:10] * 3))], name="t")
    train, test = task.load()
    assert len(train.texts) + len(test.texts) == 40 and len(set(train.texts + test.texts)) == 40
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert warnings[0] == "warning: eval.pairs.sets.mine: pairs: 200 exact repeats of 205 dropped (each counts once)"
    assert sum(int(w.split(": ")[-1].split()[0]) for w in warnings[1:]) == 30 and len(warnings) <= 3
