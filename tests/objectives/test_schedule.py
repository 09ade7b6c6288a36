"""objective.schedule: a rate that moves over training steps, exact at every step; masks that follow it (±4σ)."""

import math

import pytest
import torch

from selfsup.data.vocab import Vocab
from selfsup.objectives import ObjectiveError, build_objective, raw_length_for, span_lengths
from selfsup.objectives.schedule import Schedule

V = Vocab(size=1000, n_sentinels=100)


def test_linear_and_cosine_values_are_exact_and_held_at_the_end():
    linear = Schedule(0.3, "linear", 0.15, 600)
    assert [linear(s) for s in (0, 150, 300, 600, 900)] == pytest.approx([0.3, 0.2625, 0.225, 0.15, 0.15], abs=1e-15)
    cosine = Schedule(0.3, "cosine", 0.15, 600)
    assert cosine(0) == 0.3 and cosine(600) == 0.15 and cosine(10_000) == 0.15
    assert cosine(300) == pytest.approx(0.225, abs=1e-15)  # halfway down the cosine
    assert cosine(150) == pytest.approx(0.15 + 0.15 * (1 + math.cos(math.pi / 4)) / 2, abs=1e-15)
    # steps unset: the run's length, given at each call
    assert Schedule(0.4, "linear", 0.1)(3, total=6) == pytest.approx(0.25, abs=1e-15)
    assert Schedule(0.15)(123, total=6) == 0.15  # constant


def test_the_objective_masks_at_the_scheduled_rate_and_validates_at_the_end_value():
    mlm = build_objective("mlm", V, 256, mask_rate=0.4, schedule={"shape": "linear", "end": 0.1, "steps": 100})
    tokens = torch.randint(V.first_ordinary, V.size, (64, 256), generator=torch.Generator().manual_seed(1))
    n = tokens.numel()
    for step, rate in ((0, 0.4), (50, 0.25), (100, 0.1), (None, 0.1)):
        assert mlm.at_step(step) == pytest.approx(rate, abs=1e-15) and mlm.mask_rate == pytest.approx(rate)
        scored = int(mlm(tokens, torch.Generator().manual_seed(2)).n_scored)
        assert abs(scored - n * rate) <= 4 * math.sqrt(n * rate * (1 - rate)), (step, scored / n)
    assert build_objective("clm", V, 16).at_step(5) is None  # nothing to schedule


@pytest.mark.parametrize(
    "schedule,words",
    [
        ({"shape": "step"}, "objective.schedule.shape=step is unknown: use one of constant, linear, cosine"),
        ({"shape": "linear", "end": 0.15, "steps": 0}, "objective.schedule.steps=0 must be a whole number"),
        ({"shape": "linear", "end": 1.0}, "objective.schedule.end=1.0 is out of range"),
        ({"shape": "constant", "end": 0.3}, "set objective.schedule.shape=linear or cosine to move the rate"),
    ],
)
def test_a_bad_schedule_is_one_line_naming_the_setting(schedule, words):
    with pytest.raises(ObjectiveError) as error:
        build_objective("mlm", V, 32, schedule=schedule)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_span_corruptions_noise_density_follows_the_schedule_in_one_window_that_fits_both_ends():
    """The window is the one whose encoder input fits seq_len at the lower end (T5's rule, as for a constant rate
    there); each step's batches hide exactly round(window x rate) tokens in that step's spans; the model's positions
    cover the encoder input at the lower end and the targets at the upper one."""
    span = build_objective("span_corruption", V, 128, mask_rate=0.3, schedule={"shape": "linear", "end": 0.15})
    assert span.raw_length == raw_length_for(128, 0.15, 3.0)[0]
    tokens = torch.randint(V.first_ordinary, V.size, (4, span.raw_length), generator=torch.Generator().manual_seed(0))
    seen = {}
    for step in (0, 5, 10, None):
        rate = span.at_step(step, total=10)
        batch = span(tokens, torch.Generator().manual_seed(1))
        inputs, targets = span_lengths(span.raw_length, rate, 3.0)
        assert batch.encoder_inputs.shape == (4, inputs) and batch.targets.shape == (4, targets)
        noise = round(span.raw_length * rate)
        # the targets hold each span's sentinel, its tokens, and eos: the hidden tokens are the rest
        assert int((batch.targets >= V.first_ordinary).sum(1).max()) == noise
        assert inputs <= 128 and max(inputs, targets) <= span.model_length
        seen[step] = (inputs, targets)
    assert seen[0][1] > seen[10][1] and seen[0][0] < seen[10][0] and seen[None] == seen[10]
    assert span.model_length == max(
        span_lengths(span.raw_length, 0.15, 3.0)[0], span_lengths(span.raw_length, 0.3, 3.0)[1]
    )
