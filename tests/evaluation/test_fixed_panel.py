"""The fixed exam's panel: its members, their mean, their seeds, its neutrality towards the shipped sweeps."""

import re

import numpy as np
import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir

from selfsup.data.vocab import Vocab
from selfsup.evaluation import EvalError, Evaluation
from selfsup.evaluation.config import FixedExamConfig
from selfsup.evaluation.fixed import (
    EXAM_BATCH,
    KINDS,
    MASK_RATES,
    SPAN_LENGTHS,
    SPAN_RATES,
    UNSCORED,
    FixedExam,
    exam_objective,
    exam_seed,
    panel,
    split_lines,
)
from selfsup.models import build_model
from selfsup.run.build import prepare
from selfsup.run.cli import CONF_DIR
from selfsup.run.schema import register
from selfsup.run.settings import RunSettings

V = Vocab(300, n_sentinels=40)
VAL = np.random.default_rng(0).integers(V.first_ordinary, 300, 6000).astype(np.uint16)


def model_of(architecture):
    torch.manual_seed(0)
    return build_model(architecture, 300, 64, d_model=16, n_layers=1, n_heads=2).eval()


def grid(sweep: str) -> dict[str, list[float]]:
    """{swept key: its values} of a shipped sweep (sweeps/<sweep>.yaml)."""
    params = yaml.safe_load((CONF_DIR / "sweeps" / f"{sweep}.yaml").read_text())["hydra"]["sweeper"]["params"]
    return {key: [float(v) for v in str(values).split(",")] for key, values in params.items()}


def settings(exam):
    """(mask rate, mean span length or None) of each member of an exam."""
    return [(o.mask_rate, getattr(o, "mean_span_length", None)) for o, _ in exam.members.values()]


def test_the_panel_holds_every_value_the_shipped_sweeps_compare():
    """Neutrality: every swept mask rate, noise density and span length is a member of the exam (the single exam
    of before, MLM at 15% and span 0.15 / 3, held one value of each axis and favoured the settings near it)."""
    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        shipped = compose("train").eval.fixed  # conf/eval/default.yaml
    defaults = FixedExamConfig()
    for values in (shipped.mask_rates, defaults.mask_rates):
        assert list(values) == list(MASK_RATES)
    assert list(shipped.span_rates) == list(defaults.span_rates) == list(SPAN_RATES)
    assert list(shipped.span_lengths) == list(defaults.span_lengths) == list(SPAN_LENGTHS)
    encoder = settings(FixedExam("encoder", V, 64, VAL))
    assert set(grid("mask_rate")["objective.mask_rate"]) <= {rate for rate, _ in encoder}
    span = grid("span")
    members = settings(FixedExam("encoder_decoder", V, 64, VAL))
    assert len(members) == 7 and len(set(members)) == 7
    for rate in span["objective.mask_rate"]:  # each swept rate at the canonical mean span 3
        assert (rate, 3.0) in members
    for length in span["objective.mean_span_length"]:  # each swept span at the canonical rate 0.15
        assert (0.15, length) in members


def test_member_names_are_metric_safe_and_not_kinds():
    names = [
        *panel("encoder"),
        *panel("encoder_decoder"),
        *panel("encoder", mask_rates=[0.125]),
        *panel("encoder_decoder", span_rates=[0.333], span_lengths=[2.5]),
    ]
    assert names[:4] == ["rate_10", "rate_15", "rate_25", "rate_40"]
    assert names[4:11] == [
        "rate_10_span_3",
        "rate_15_span_3",
        "rate_25_span_3",
        "rate_50_span_3",
        "rate_15_span_2",
        "rate_15_span_5",
        "rate_15_span_10",
    ]
    assert names[11:] == ["rate_12p5", "rate_33p3_span_3", "rate_15_span_2p5"]
    kinds = {k for ks in KINDS.values() for k in ks}
    for name in names:  # W&B's sortable names; a CSV column
        assert re.fullmatch(r"[_a-zA-Z][_a-zA-Z0-9]*", name) and name not in kinds


@pytest.mark.parametrize("architecture", ["encoder", "encoder_decoder"])
def test_the_loss_is_the_mean_of_the_members_each_as_if_alone(architecture):
    exam = FixedExam(architecture, V, 64, VAL)
    model = model_of(architecture)
    found = exam.metrics(model)
    members = [found[f"eval/fixed/{m}/loss"] for m in exam.members]
    assert found["eval/fixed/loss"] == sum(members) / len(members)  # exactly: each setting counts equally
    assert found["eval/fixed/perplexity"] == pytest.approx(np.exp(found["eval/fixed/loss"]), rel=1e-12)
    for (name, (objective, _)), loss in zip(exam.members.items(), members):
        if architecture == "encoder":  # the member alone (an encoder-decoder's windows depend on the panel)
            assert (
                FixedExam(architecture, V, 64, VAL, max_tokens=None, mask_rates=[objective.mask_rate]).loss(model)
                == loss
            )
    graded = [k for k in KINDS[architecture] if k not in UNSCORED]
    shares = sum(found[f"eval/fixed/{k}/fraction"] for k in graded)
    weighted = sum(found[f"eval/fixed/{k}/fraction"] * found[f"eval/fixed/{k}/loss"] for k in graded)
    assert shares == pytest.approx(1.0, abs=1e-12) and weighted == pytest.approx(found["eval/fixed/loss"], rel=1e-12)


def test_the_decoder_has_one_member_and_the_keys_of_before():
    exam = FixedExam("decoder", V, 64, VAL, unigram=np.full(300, -np.log(300)))
    assert list(exam.members) == ["clm"]
    assert set(exam.metrics(model_of("decoder"))) == {
        "eval/fixed/loss",
        "eval/fixed/perplexity",
        "eval/fixed/unigram_loss",
    }


def test_each_member_has_its_own_seeds_and_the_canonical_one_keeps_the_single_exams():
    """Seeded by (family, member, batch index) only; the predictions table shows the canonical member, whose
    masks are the single exam's of before the panel (MLM at 15%, span corruption at 0.15 / 3)."""
    exam = FixedExam("encoder_decoder", V, 64, VAL, max_tokens=None)
    assert exam.canonical == "rate_15_span_3"
    objective, windows = exam.members["rate_15_span_3"]
    first = next(exam.batches(member="rate_15_span_3"))
    again = objective(windows[:EXAM_BATCH], torch.Generator().manual_seed(exam_seed("encoder_decoder", 0)))
    assert torch.equal(first.encoder_inputs, again.encoder_inputs) and torch.equal(first.targets, again.targets)
    other = next(exam.batches(member="rate_15_span_2"))
    objective, windows = exam.members["rate_15_span_2"]
    again = objective(
        windows[:EXAM_BATCH], torch.Generator().manual_seed(exam_seed("encoder_decoder", 0, "rate_15_span_2"))
    )
    assert torch.equal(other.encoder_inputs, again.encoder_inputs)
    # the predictions table: the canonical member's first windows, with or without it in the panel
    without = FixedExam("encoder_decoder", V, 64, VAL, max_tokens=None, span_rates=[0.5], span_lengths=[2])
    assert list(without.members) == ["rate_50_span_3", "rate_15_span_2"]
    assert (without.objective.mask_rate, without.objective.mean_span_length) == (0.15, 3.0)
    assert without.objective.raw_length == exam_objective("encoder_decoder", V, 64).raw_length  # at data.seq_len
    assert torch.equal(next(without.batches()).targets, next(exam.batches()).targets)
    encoder = FixedExam("encoder", V, 64, VAL, max_tokens=None, mask_rates=[0.4])
    assert list(encoder.members) == ["rate_40"] and encoder.objective.mask_rate == 0.15
    assert torch.equal(
        next(encoder.batches()).encoder_inputs,
        next(FixedExam("encoder", V, 64, VAL, max_tokens=None).batches()).encoder_inputs,
    )


def test_members_share_max_tokens_and_one_without_a_window_leaves_the_mean():
    exam = FixedExam("encoder", V, 64, VAL, max_tokens=4 * 64 * 3)
    assert [len(w) for _, w in exam.members.values()] == [3, 3, 3, 3]
    longest = max(o.raw_length for o, _ in FixedExam("encoder_decoder", V, 32, VAL).members.values())
    tiny = FixedExam("encoder_decoder", V, 32, VAL[: longest - 1], max_tokens=None)  # one window or none each
    found = tiny.metrics(model_of("encoder_decoder"))
    kept = [m for m, (o, w) in tiny.members.items() if len(w)]
    assert kept == [m for m, (o, _) in tiny.members.items() if o.raw_length < longest] and 0 < len(kept) < 7
    assert all(f"eval/fixed/{m}/loss" not in found for m in tiny.members if m not in kept)
    assert found["eval/fixed/loss"] == sum(found[f"eval/fixed/{m}/loss"] for m in kept) / len(kept)


def test_every_span_member_has_the_fewest_spans_of_the_panel_so_every_run_has_seen_its_sentinels():
    """A run trained at (rate, mean span) meets only sentinels <extra_id_0 .. n-1>, n fixed by its window: each
    member's window is the longest with no more spans than the member with the fewest has at data.seq_len."""
    from selfsup.objectives.span import span_counts

    for seq_len in (64, 128):
        exam = FixedExam("encoder_decoder", Vocab(300, n_sentinels=40), seq_len, VAL)
        at_seq_len = {
            name: span_counts(exam_objective_at(params, seq_len), params["mask_rate"], params["mean_span_length"])[1]
            for name, (_, params) in panel("encoder_decoder").items()
        }
        fewest = min(at_seq_len.values())
        for name, (objective, windows) in exam.members.items():
            rate, span = objective.mask_rate, objective.mean_span_length
            assert span_counts(objective.raw_length, rate, span)[1] == fewest
            assert (
                objective.raw_length == exam_objective_at({"mask_rate": rate, "mean_span_length": span}, seq_len)
                or span_counts(objective.raw_length + 1, rate, span)[1] > fewest
            )  # the longest such window
            assert windows.shape[1] == objective.raw_length
    assert fewest == 2 and at_seq_len["rate_50_span_3"] > 10  # at 128: (0.15, 10) has 2 spans, (0.5, 3) 21


def exam_objective_at(params: dict, seq_len: int) -> int:
    from selfsup.objectives import build_objective

    return build_objective(
        "span_corruption",
        Vocab(300, n_sentinels=40),
        seq_len,
        "encoder_decoder",
        mask_rate=params["mask_rate"],
        mean_span_length=params["mean_span_length"],
    ).raw_length


@pytest.mark.parametrize(
    "fixed,message",
    [
        ({"mask_rates": []}, r"eval.fixed.mask_rates=\[\] is empty"),
        ({"mask_rates": [0.15, 1.0]}, r"eval.fixed.mask_rates=\[0.15, 1.0\]: 1.0 is not a rate in \(0, 1\)"),
        ({"span_rates": [0.0]}, r"eval.fixed.span_rates=\[0.0\]: 0.0 is not a rate"),
        ({"span_rates": [float("nan")]}, r"nan is not a rate"),
        ({"span_lengths": [3, 0.5]}, r"eval.fixed.span_lengths=\[3, 0.5\]: 0.5 is not a mean span length >= 1"),
        ({"span_lengths": []}, r"eval.fixed.span_lengths=\[\] is empty"),
    ],
)
def test_bad_panel_settings_are_refused_in_one_line(fixed, message):
    with pytest.raises(EvalError, match=message) as err:
        Evaluation(fixed={"max_tokens": 1000, **fixed}).check()
    assert "\n" not in str(err.value)


def test_the_panel_is_set_from_the_config(cache_dir):
    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose(
            "train",
            overrides=[
                "debug=tiny",
                "eval.pairs=null",
                "eval.tasks=null",
                f"data.cache_dir={cache_dir}",
                "eval.fixed.mask_rates=[0.2,0.3]",
            ],
        )
        bad = compose(
            "train",
            overrides=[
                "debug=tiny",
                "eval.pairs=null",
                "eval.tasks=null",
                f"data.cache_dir={cache_dir}",
                "eval.fixed.span_lengths=[0.5]",
            ],
        )
        with pytest.raises(Exception, match="mask_rate"):  # a typo'd key: refused by the schema
            compose("train", overrides=["debug=tiny", "eval.fixed.mask_rate=[0.2]"])
    corpus, _, evaluation = prepare(RunSettings.of(cfg))
    evaluation.setup("encoder", corpus.vocab, corpus.tokenizer, 32, corpus.val_tokens, 32)
    assert list(evaluation.exam.members) == ["rate_20", "rate_30"]
    with pytest.raises(EvalError, match=r"eval.fixed.span_lengths=\[0.5\]"):
        prepare(RunSettings.of(bad))


def test_the_closing_lines_list_the_panel_then_the_kinds():
    metrics = {
        "eval/fixed/loss": 5.5,
        "eval/fixed/rate_10_span_3/loss": 5.012,
        "eval/fixed/rate_12p5_span_2p5/loss": 6.0,
        "eval/fixed/first/loss": 6.52,
        "eval/fixed/first/fraction": 0.25,
        "eval/fixed/first/unigram_loss": 6.6,
        "eval/fixed/sentinel/loss": 1.5,
    }
    assert split_lines(metrics) == [
        "fixed exam panel (nats): rate 10% span 3 5.01, rate 12.5% span 2.5 6.00",
        "fixed exam by target (nats): first 6.52 (unigram 6.60, 25%);  sentinel 1.50 (not in the loss)",
    ]
    assert split_lines({"eval/fixed/loss": 5.0, "eval/fixed/unigram_loss": 6.0}) == [
        "fixed exam by target (nats): next 5.00 (unigram 6.00)"
    ]
    many = {f"eval/fixed/rate_{r}/loss": 5.0 for r in range(10, 30)}
    lines = split_lines(many, width=60)
    assert all(len(line) <= 60 for line in lines) and all(line.startswith("  rate") for line in lines[1:])
    assert sum(line.count("%") for line in lines) == 20
