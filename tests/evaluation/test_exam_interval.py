"""The fixed exam's uncertainty: per-window sums that add up to its loss, a stratified paired bootstrap over its
windows (identical models give exactly 0 [0, 0], a clear difference is called), coverage within 4 sigma."""

import math

import numpy as np
import pytest
import torch

from selfsup.data.vocab import Vocab
from selfsup.evaluation.fixed import FixedExam
from selfsup.evaluation.stats import exam_difference, exam_loss
from selfsup.evaluation.suite import exam_interval
from selfsup.models import build_model

V = Vocab(300, n_sentinels=40)
VAL = np.random.default_rng(0).integers(V.first_ordinary, 300, 6000).astype(np.uint16)


def model_of(architecture, seed=0):
    torch.manual_seed(seed)
    return build_model(architecture, 300, 64, d_model=16, n_layers=1, n_heads=2).eval()


@pytest.mark.parametrize("architecture", ["encoder", "encoder_decoder", "decoder"])
def test_the_windows_add_up_to_the_exam_and_its_interval_holds_it(architecture):
    unigram = np.log(np.full(300, 1 / 300))
    exam = FixedExam(architecture, V, 64, VAL, unigram=unigram)
    found = exam.metrics(model_of(architecture))
    w = exam.windows_last
    assert set(w) == {"nll", "count", "unigram", "member"}
    assert len(w["nll"]) == sum(len(windows) for _, windows in exam.members.values())
    per_member = [
        w["nll"][w["member"] == i].sum() / w["count"][w["member"] == i].sum() for i in range(len(exam.members))
    ]
    assert np.mean(per_member) == pytest.approx(found["eval/fixed/loss"], rel=1e-12)
    # the unigram gap: a uniform unigram scores log(300) on every target
    metrics = exam_interval(w)
    assert metrics["eval/fixed/unigram_gap"] == pytest.approx(found["eval/fixed/loss"] - math.log(300), rel=1e-9)
    assert metrics["eval/fixed/loss_low"] < found["eval/fixed/loss"] < metrics["eval/fixed/loss_high"]
    assert metrics["eval/fixed/loss_se"] > 0
    assert FixedExam(architecture, V, 64, VAL).fingerprint == exam.fingerprint  # the same windows for every run
    assert FixedExam(architecture, V, 64, VAL[1:]).fingerprint != exam.fingerprint


def test_identical_models_give_exactly_zero_and_different_models_a_called_difference():
    exam = FixedExam("encoder", V, 64, VAL)
    exam.metrics(model_of("encoder", 0))
    a = exam.windows_last
    exam.metrics(model_of("encoder", 0))
    same = exam.windows_last
    d = exam_difference(a["nll"], same["nll"], a["count"], a["member"])
    assert (d.value, d.low, d.high) == (0.0, 0.0, 0.0) and not d.excludes_zero
    exam.metrics(model_of("encoder", 1))
    b = exam.windows_last
    assert np.array_equal(a["count"], b["count"])  # the same masks: the same targets, paired
    # a model that is worse by 0.05 nats on every target: called, with its exact value
    worse = b["nll"] + 0.05 * b["count"]
    d = exam_difference(worse, b["nll"], b["count"], b["member"])
    assert d.value == pytest.approx(0.05, abs=1e-12) and d.low == pytest.approx(0.05) and d.excludes_zero


def test_the_interval_covers_the_true_loss_95_percent_of_the_time():
    """200 simulated exams (2 members of 150 windows, 10-30 targets each, per-target loss drawn around 5 and
    6): the interval of the mean over members covers 5.5 within 4 standard errors of 0.95."""
    rng = np.random.default_rng(3)
    member = np.repeat([0, 1], 150)
    covered = 0
    for i in range(200):
        count = rng.integers(10, 31, 300).astype(float)
        mean = np.where(member == 0, 5.0, 6.0)
        nll = rng.normal(mean * count, 2.0 * np.sqrt(count))
        m = exam_loss(nll, count, member, replicates=400, seed=i)
        covered += m.low <= 5.5 <= m.high
    sigma = math.sqrt(0.95 * 0.05 / 200)
    assert abs(covered / 200 - 0.95) <= 4 * sigma


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="over the same windows"):
        exam_difference(np.ones(3), np.ones(4), np.ones(3), np.zeros(3))
