"""The simple baseline beside every task's margin (TF-IDF + logistic regression): what it learns, and how the
verdict and the tables say a run is below it."""

import numpy as np

from selfsup.evaluation.simple import tfidf_predictions
from selfsup.evaluation.stats import mean_interval
from selfsup.evaluation.tasks import Examples
from selfsup.results.verdict import verdict_text

WORDS = "parser reader writer socket thread buffer stream token".split()


def test_a_task_its_words_decide_is_learned_and_a_pair_task_by_its_overlap():
    rng = np.random.default_rng(0)

    def topic(n):  # label 1: the text names a network word
        texts, labels = [], []
        for _ in range(n):
            label = int(rng.integers(2))
            word = rng.choice(["socket", "stream"] if label else ["parser", "token"])
            texts.append(" ".join([*rng.choice(WORDS[:2] + WORDS[4:6], 5), word]))
            labels.append(label)
        return Examples(texts, labels)

    train, test = topic(400), topic(200)
    assert (tfidf_predictions(train, test) == np.array(test.labels)).mean() > 0.95

    def pairs(n):  # label 1: the second text repeats words of the first
        texts, labels = [], []
        for _ in range(n):
            label = int(rng.integers(2))
            first = list(rng.choice(WORDS, 4, replace=False))
            second = first[:3] if label else [w for w in WORDS if w not in first][:3]
            texts.append((" ".join(first), " ".join(second)))
            labels.append(label)
        return Examples(texts, labels)

    train, test = pairs(400), pairs(200)
    assert (tfidf_predictions(train, test) == np.array(test.labels)).mean() > 0.95
    assert list(tfidf_predictions(Examples(["a b", "c d"], [1, 1]), Examples(["e"], [0]))) == [1]  # one class


def test_the_baselines_interval_is_a_bootstrap_over_test_examples():
    outcomes = (np.random.default_rng(1).random(400) < 0.7).astype(float)
    found = mean_interval(outcomes)
    se = outcomes.std(ddof=1) / np.sqrt(len(outcomes))
    assert found.value == outcomes.mean() and found.low < found.value < found.high
    assert abs((found.high - found.low) / (2 * 1.96 * se) - 1) < 0.15 and mean_interval(outcomes) == found


def test_the_verdict_says_where_a_run_is_below_the_simple_baseline():
    def row(run, gap, low, high):
        return {
            "status": "finished", "objective": "clm", "run_dir": f"s/{run}", "swept": {"seed": run},
            "eval": {"eval/topic/accuracy": 0.5, "eval/topic/margin": 0.1, "eval/topic/margin_low": 0.05,
                     "eval/topic/margin_high": 0.15, "eval/topic/vs_tfidf": gap, "eval/topic/vs_tfidf_low": low,
                     "eval/topic/vs_tfidf_high": high},
        }  # fmt: skip

    text = verdict_text([row(0, -0.363, -0.398, -0.330)])
    assert "topic: shows pretraining: clm +0.100 [+0.050, +0.150]. below TF-IDF + logistic regression: clm by " in text
    assert "clm by 0.363 [0.330, 0.398]" in text
    assert "below TF-IDF" not in verdict_text([row(0, -0.02, -0.05, 0.01)])  # the interval holds 0: not said
    seeds = verdict_text([row(0, -0.3, -0.35, -0.25), row(1, -0.2, -0.25, -0.15)])
    assert "below TF-IDF + logistic regression: clm by a mean 0.250 (0.200 to 0.300 over 2 seeds)" in seeds
    assert "below TF-IDF" not in verdict_text([row(0, -0.3, -0.35, -0.25), row(1, -0.1, -0.2, 0.01)])


def test_a_generation_jobs_baselines_copy_the_input_and_write_the_most_frequent_target():
    from selfsup.evaluation.simple import written_outcomes

    found = written_outcomes(
        ["the parser reads data", "a b"], ["parser reads", "x y"], ["x y", "q", "x y"]
    )  # F1 of "the parser reads data" against "parser reads" (SQuAD's normalising drops "the"): 2 * 2/3 * 1 / (5/3)
    assert found["copy"]["exact_match"].tolist() == [0.0, 0.0]
    assert np.allclose(found["copy"]["token_f1"], [0.8, 0.0])
    assert found["frequent"]["exact_match"].tolist() == [0.0, 1.0] and found["frequent"]["token_f1"].tolist() == [0, 1]


def test_the_verdict_says_where_a_writer_is_below_copying_its_input():
    evaluated = {"eval/sum/token_f1": 0.05, "eval/sum/token_f1/margin": 0.03, "eval/sum/token_f1/margin_low": 0.01,
                 "eval/sum/token_f1/margin_high": 0.05, "eval/sum/token_f1/vs_copy": -0.26,
                 "eval/sum/token_f1/vs_copy_low": -0.3, "eval/sum/token_f1/vs_copy_high": -0.22,
                 "eval/sum/token_f1/vs_frequent": 0.01, "eval/sum/token_f1/vs_frequent_low": -0.01,
                 "eval/sum/token_f1/vs_frequent_high": 0.03}  # fmt: skip
    text = verdict_text([{"status": "finished", "objective": "clm", "run_dir": "s/0", "eval": evaluated}])
    assert "below copying the input: clm by 0.260 [0.220, 0.300]" in text
    assert "most frequent" not in text  # its interval holds 0
