"""The paired bootstrap of a margin over random initialisation: exact values where the arrays fix them,
coverage within 4 sigma of 95% on simulated data."""

import math

import numpy as np
import pytest

from selfsup.evaluation.stats import difference, margin


def test_identical_models_give_zero_and_an_interval_that_contains_it():
    rng = np.random.default_rng(0)
    outcomes = rng.integers(0, 2, 400).astype(float)
    m = margin(outcomes, np.stack([outcomes, outcomes, outcomes]))
    assert m.value == 0.0 and m.low == 0.0 and m.high == 0.0 and not m.excludes_zero
    other = rng.integers(0, 2, 400).astype(float)  # an unrelated model of the same accuracy: contains 0
    m = margin(other, np.stack([outcomes]))
    assert m.low < 0 < m.high


def test_a_clear_margin_excludes_zero_and_its_value_is_the_difference_of_means():
    rng = np.random.default_rng(1)
    trained = (rng.random(1000) < 0.8).astype(float)
    seeds = (rng.random((3, 1000)) < 0.5).astype(float)
    m = margin(trained, seeds)
    assert m.value == pytest.approx(trained.mean() - seeds.mean(), abs=1e-12)
    assert m.excludes_zero and m.low > 0.2
    half = 1.96 * math.sqrt(0.8 * 0.2 / 1000 + 0.25 / 3000)  # about the normal approximation's half-width
    assert (m.high - m.low) / 2 == pytest.approx(half, rel=0.35)
    assert margin(trained, seeds) == m  # a fixed draw: the same arrays, the same interval


def test_seeds_that_disagree_widen_the_interval():
    rng = np.random.default_rng(2)
    trained = (rng.random(2000) < 0.6).astype(float)
    base = (rng.random(2000) < 0.5).astype(float)
    agree = np.stack([base, base, base])
    # the same examples, but seeds whose accuracies differ by 0.1: a bootstrap over examples alone misses it
    disagree = np.stack(
        [np.where(rng.random(2000) < 0.2, 0.0, base), base, np.where(rng.random(2000) < 0.2, 1.0, base)]
    )
    narrow, wide = margin(trained, agree), margin(trained, disagree)
    assert (wide.high - wide.low) > 1.5 * (narrow.high - narrow.low)


def test_the_interval_covers_the_true_margin_95_percent_of_the_time():
    """200 simulated evaluations (trained p=0.6, random-init p=0.5 at 3 seeds, 300 examples): coverage within
    4 standard errors of 0.95."""
    rng = np.random.default_rng(3)
    covered = 0
    for i in range(200):
        trained = (rng.random(300) < 0.6).astype(float)
        seeds = (rng.random((3, 300)) < 0.5).astype(float)
        m = margin(trained, seeds, replicates=400, seed=i)
        covered += m.low <= 0.1 <= m.high
    sigma = math.sqrt(0.95 * 0.05 / 200)
    assert abs(covered / 200 - 0.95) <= 4 * sigma


def test_the_difference_of_two_runs_margins():
    rng = np.random.default_rng(4)
    seeds = (rng.random((3, 800)) < 0.5).astype(float)
    a = (rng.random(800) < 0.75).astype(float)
    same = difference(a, seeds, a, seeds)
    assert same.value == 0.0 and same.low <= 0 <= same.high and not same.excludes_zero
    b = (rng.random(800) < 0.55).astype(float)
    lead = difference(a, seeds, b, seeds)
    assert lead.value == pytest.approx(a.mean() - b.mean()) and lead.excludes_zero and lead.low > 0
    with pytest.raises(ValueError, match="same examples"):
        difference(a, seeds, b[:10], seeds[:, :10])


def test_outcomes_of_different_examples_are_refused():
    with pytest.raises(ValueError, match="same n"):
        margin(np.ones(5), np.ones((3, 4)))


def test_standard_error_of_an_accuracy_is_its_binomial_error_over_the_test_examples():
    from selfsup.evaluation.stats import standard_error

    outcomes = np.array([1.0] * 60 + [0.0] * 40)
    assert standard_error(outcomes) == pytest.approx(np.sqrt(0.6 * 0.4 / 99))
    assert standard_error([1.0, 0.0, 1.0, 0.0]) == pytest.approx(np.sqrt(1 / 3) / 2)
    assert np.isnan(standard_error([1.0]))
