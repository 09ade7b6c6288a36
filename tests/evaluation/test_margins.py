"""Margins over random initialisation in the run's metrics: pairs and probe, each with its interval."""

import pytest
import torch
from test_pairs import BLIMP, WORDS, blimp_file, word_tokenizer

from selfsup.data.vocab import Vocab
from selfsup.evaluation import MinimalPairs, PairSource
from selfsup.evaluation.stats import margin
from selfsup.loss import stream_seed
from selfsup.models import build_model


def make(vocab):
    return lambda: build_model("decoder", vocab.size, 24, d_model=32, n_layers=1, n_heads=2)


def test_pair_margins_are_accuracy_minus_random_init_with_their_interval(tmp_path):
    tok, vocab = word_tokenizer(WORDS), Vocab(size=len(WORDS), n_sentinels=4)
    path = blimp_file(tmp_path / "p.jsonl", BLIMP * 20)  # 5 pairs in two groups (repeats count once)
    pairs = MinimalPairs(
        builtin=False, sets={"b": PairSource(paths=[str(path)], group_field="UID")}, random_init_seeds=3
    )
    pairs.setup("decoder", vocab, tok, 24, make_model=make(vocab))
    torch.manual_seed(5)
    out = pairs(make(vocab)())
    for key in ("eval/pairs/b", "eval/pairs/b/order", "eval/pairs/b/agent"):
        m = margin(pairs.last[key], pairs.random_init[key])
        assert out[f"{key}/margin"] == pytest.approx(out[f"{key}/accuracy"] - out[f"{key}/random_init_accuracy"])
        assert (out[f"{key}/margin"], out[f"{key}/margin_low"], out[f"{key}/margin_high"]) == (m.value, m.low, m.high)
        assert out[f"{key}/margin_low"] <= out[f"{key}/margin"] <= out[f"{key}/margin_high"]
    assert pairs.random_init["eval/pairs/b"].shape == (3, len(BLIMP))


def test_a_random_init_model_scored_against_its_own_seed_has_margin_zero(tmp_path):
    tok, vocab = word_tokenizer(WORDS), Vocab(size=len(WORDS), n_sentinels=4)
    path = blimp_file(tmp_path / "p.jsonl", BLIMP * 20)
    pairs = MinimalPairs(builtin=False, sets={"b": PairSource(paths=[str(path)])}, random_init_seeds=1)
    pairs.setup("decoder", vocab, tok, 24, make_model=make(vocab))
    torch.manual_seed(stream_seed("pairs-random-init", 0))  # the baseline's own seed: the same model
    out = pairs(make(vocab)())
    assert out["eval/pairs/b/margin"] == 0.0 and out["eval/pairs/b/margin_low"] == 0.0
    assert out["eval/pairs/b/margin_high"] == 0.0
