"""Objectives: exact values where the maths fixes them, ±4σ bounds where randomness is involved."""

import math

import pytest
import torch

from selfsup.data.vocab import Vocab
from selfsup.objectives import (
    IGNORE,
    OBJECTIVES,
    CausalLM,
    Denoiser,
    MaskedLM,
    Mixture,
    ObjectiveError,
    PrefixLM,
    SpanCorruption,
    build_objective,
    raw_length_for,
    span_lengths,
)

V = Vocab(size=1000, n_sentinels=100)
ORD = V.first_ordinary


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def ordinary(B, L, seed=1):
    return torch.randint(ORD, V.size, (B, L), generator=gen(seed))


def within_4_sigma(count, n, p):
    sigma = math.sqrt(n * p * (1 - p))
    return abs(count - n * p) <= 4 * sigma


# ---------------------------------------------------------------- the seeds' ten-token sentence
SENTENCE = "the fund cut its exposure to energy names sharply this week".split()[:10]


def sentence_ids():
    return torch.arange(ORD, ORD + 10).unsqueeze(0)  # ten distinct ordinary tokens


def test_clm_scores_nine_of_ten():
    clm = CausalLM(V, seq_len=9)
    assert clm.raw_length == 10
    b = clm(sentence_ids(), gen())
    assert b.n_scored.item() == 9 and b.n_inputs.item() == 10
    # position t predicts token t+1 from tokens <= t
    assert torch.equal(b.decoder_inputs[0], sentence_ids()[0, :9])
    assert torch.equal(b.targets[0], sentence_ids()[0, 1:])


def test_clm_one_token_sequence_has_no_scored_position():
    b = CausalLM(V, seq_len=2)(torch.tensor([[ORD + 5, V.pad_id, V.pad_id]]), gen())
    assert b.n_scored.item() == 0


def test_clm_padding_is_never_a_target():
    b = CausalLM(V, seq_len=4)(torch.tensor([[ORD, ORD + 1, ORD + 2, V.pad_id, V.pad_id]]), gen())
    assert b.targets.tolist() == [[ORD + 1, ORD + 2, IGNORE, IGNORE]]


def test_mlm_fifteen_percent_of_ten_tokens_is_about_one_and_a_half():
    mlm = MaskedLM(V, seq_len=10)
    draws = 4000
    scored = mlm(sentence_ids().repeat(draws, 1), gen()).targets.ne(IGNORE).sum().item()
    assert within_4_sigma(scored, draws * 10, 0.15)
    assert abs(scored / draws - 1.5) < 0.1


def test_span_corruption_one_three_token_span():
    sc = SpanCorruption(V, seq_len=10, mask_rate=0.3, mean_span_length=3, raw_length=10)
    assert (sc.noise, sc.spans) == (3, 1)
    b = sc(sentence_ids(), gen())
    s0 = V.sentinel(0)
    # one span of 3 tokens to generate, and it ends the sequence (T5's layout)
    assert b.targets.tolist() == [[s0, ORD + 7, ORD + 8, ORD + 9, V.eos_id]]
    assert b.encoder_inputs.tolist() == [[*range(ORD, ORD + 7), s0, V.eos_id]]
    assert b.n_inputs.item() == 10  # the encoder still reads all ten positions of context


# ---------------------------------------------------------------- MLM
def test_mlm_selection_and_80_10_10_within_4_sigma():
    tokens = ordinary(256, 512)
    b = MaskedLM(V, seq_len=512)(tokens, gen(3))
    chosen = b.targets != IGNORE
    n, k = tokens.numel(), chosen.sum().item()
    assert within_4_sigma(k, n, 0.15)
    inp = b.encoder_inputs[chosen]
    masked = (inp == V.mask_id).sum().item()
    unchanged = (inp == tokens[chosen]).sum().item()
    randomized = k - masked - unchanged
    # a random replacement equal to the original counts as unchanged: p = 0.1 + 0.1/|ordinary|
    p_same = 0.1 + 0.1 / (V.size - ORD)
    assert within_4_sigma(masked, k, 0.8)
    assert within_4_sigma(unchanged, k, p_same)
    assert within_4_sigma(randomized, k, 0.1 - 0.1 / (V.size - ORD))
    # targets are the original tokens; nothing outside the chosen set changed
    assert torch.equal(b.targets[chosen], tokens[chosen])
    assert torch.equal(b.encoder_inputs[~chosen], tokens[~chosen])


def test_mlm_never_chooses_special_tokens_and_never_inserts_them():
    tokens = ordinary(64, 128)
    specials = torch.randint(0, ORD, (64, 128), generator=gen(5))
    is_special = torch.rand(64, 128, generator=gen(6)) < 0.3
    tokens = torch.where(is_special, specials, tokens)
    b = MaskedLM(V, seq_len=128, mask_rate=0.5, mask_token_prob=0.0, random_token_prob=1.0)(tokens, gen(7))
    assert (b.targets[is_special] == IGNORE).all()
    assert torch.equal(b.encoder_inputs[is_special], tokens[is_special])
    chosen = b.targets != IGNORE
    assert chosen.sum() > 1000
    assert (b.encoder_inputs[chosen] >= ORD).all()  # random replacements are ordinary tokens


def test_mlm_whole_word_masks_all_pieces_together():
    word_start = torch.zeros(V.size, dtype=torch.bool)
    word_start[:ORD] = True
    word_start[ORD : ORD + 100] = True  # ids ORD..ORD+99 begin a word, the rest continue one
    vocab = Vocab(size=V.size, word_start=word_start)
    starts = torch.randint(ORD, ORD + 100, (128, 64), generator=gen(1))
    pieces = torch.randint(ORD + 100, V.size, (128, 64), generator=gen(2))
    tokens = torch.where(torch.rand(128, 64, generator=gen(3)) < 0.4, starts, pieces)
    b = MaskedLM(vocab, seq_len=64, whole_word=True)(tokens, gen(4))
    chosen = b.targets != IGNORE
    word = word_start[tokens].cumsum(dim=1)
    for row in range(128):
        for w in word[row].unique():
            in_word = chosen[row][word[row] == w]
            assert in_word.all() or not in_word.any()
    assert within_4_sigma(chosen.sum().item(), tokens.numel(), 0.15) or abs(chosen.float().mean() - 0.15) < 0.02


# ---------------------------------------------------------------- span corruption
def reconstruct(inputs, targets):
    """Put the target spans back in place of their sentinels (drops eos)."""
    spans, current = {}, None
    for t in targets:
        if t == V.eos_id:
            break
        if V.sentinel_start <= t < V.first_ordinary:
            current = t
            spans[current] = []
        else:
            spans[current].append(t)
    out = []
    for t in inputs:
        if t == V.eos_id:
            break
        out.extend(spans[t] if t in spans else [t])
    return out


@pytest.mark.parametrize("rate,mean", [(0.15, 3), (0.25, 2), (0.5, 10), (0.15, 1), (0.5, 3)])
def test_span_corruption_exact_counts_order_and_reconstruction(rate, mean):
    sc = SpanCorruption(V, seq_len=128, mask_rate=rate, mean_span_length=mean)
    L = sc.raw_length
    tokens = ordinary(32, L)
    b = sc(tokens, gen(11))
    noise, spans = sc.noise, sc.spans
    assert noise == min(max(round(L * rate), 1), L - 1) and spans == max(1, round(noise / mean))
    assert b.encoder_inputs.shape == (32, L - noise + spans + 1) == (32, sc.inputs_length)
    assert b.targets.shape == (32, noise + spans + 1) == (32, sc.targets_length)
    assert sc.inputs_length <= 128
    mask = sc.noise_mask(32, gen(11), tokens.device)
    for row in range(32):
        inp, tgt = b.encoder_inputs[row].tolist(), b.targets[row].tolist()
        sent_in = [t for t in inp if V.sentinel_start <= t < ORD]
        sent_tg = [t for t in tgt if V.sentinel_start <= t < ORD]
        assert sent_in == sent_tg == [V.sentinel(i) for i in range(spans)]
        assert inp[0] >= ORD  # starts with non-noise
        assert tgt[0] == V.sentinel(0) and tgt[-1] == V.eos_id and inp[-1] == V.eos_id
        assert tgt[-2] == tokens[row, -1].item()  # the last span ends the sequence
        assert reconstruct(inp, tgt) == tokens[row].tolist()
        assert mask[row].sum().item() == noise
    # decoder input is the target shifted right
    assert torch.equal(b.decoder_inputs[:, 1:], b.targets[:, :-1])
    assert (b.decoder_inputs[:, 0] == V.bos_id).all()


def test_span_corruption_static_shapes_across_batches():
    sc = SpanCorruption(V, seq_len=64, mask_rate=0.2, mean_span_length=2)
    g = gen(0)
    shapes = {
        (
            sc(ordinary(8, sc.raw_length, seed=s), g).encoder_inputs.shape,
            sc(ordinary(8, sc.raw_length, seed=s), g).targets.shape,
        )
        for s in range(5)
    }
    assert len(shapes) == 1


def test_span_lengths_average_the_mean():
    sc = SpanCorruption(V, seq_len=512, mask_rate=0.15, mean_span_length=3)
    m = sc.noise_mask(64, gen(2), torch.device("cpu"))
    starts = (m[:, 1:] & ~m[:, :-1]).sum()
    assert starts.item() == 64 * sc.spans and sc.noise / sc.spans == pytest.approx(85 / 28)


@pytest.mark.parametrize(
    "inputs,rate,mean,raw,targets", [(512, 0.15, 3, 568, 114), (64, 0.2, 2, 70, 22), (64, 0.2, 1, 63, 27)]
)
def test_t5_length_pairs(inputs, rate, mean, raw, targets):
    assert raw_length_for(inputs, rate, mean) == (raw, targets)
    assert span_lengths(raw, rate, mean) == (inputs, targets)
    sc = SpanCorruption(V, seq_len=inputs, mask_rate=rate, mean_span_length=mean)
    assert (sc.raw_length, sc.inputs_length, sc.targets_length) == (raw, inputs, targets)


@pytest.mark.parametrize("rate,mean", [(0.15, 3), (0.5, 3), (0.5, 32), (0.01, 1)])
def test_span_inputs_fit_the_requested_length(rate, mean):
    """The encoder never gets more than data.seq_len tokens, down to the shortest length that fits."""
    for seq_len in range(3, 80):
        sc = SpanCorruption(Vocab(size=1000, n_sentinels=100), seq_len, mask_rate=rate, mean_span_length=mean)
        assert sc.inputs_length <= seq_len
        assert sc(torch.full((2, sc.raw_length), ORD), gen()).encoder_inputs.shape == (2, sc.inputs_length)


# ---------------------------------------------------------------- prefix LM
def test_prefix_lm_decoder_scores_only_after_the_prefix():
    p = PrefixLM(V, seq_len=32)
    tokens = ordinary(512, 33)
    b = p(tokens, gen(4))
    split = b.prefix_length
    assert split.min() >= 1 and split.max() <= 32
    for row in range(512):
        s = split[row].item()
        scored = (b.targets[row] != IGNORE).nonzero().flatten().tolist()
        assert scored == list(range(s - 1, 32))  # target j is token j+1, scored iff j+1 >= split
        assert b.targets[row, s - 1 :].tolist() == tokens[row, s:].tolist()
    # split uniform on [1, 32]: mean 16.5, variance (32^2-1)/12
    sd = math.sqrt((32**2 - 1) / 12 / 512)
    assert abs(split.float().mean().item() - 16.5) < 4 * sd


def test_prefix_lm_encoder_decoder_prefix_is_the_encoder_input():
    p = PrefixLM(V, seq_len=16, architecture="encoder_decoder")
    tokens = ordinary(64, 16)
    b = p(tokens, gen(9))
    for row in range(64):
        n_prefix = b.encoder_mask[row].sum().item()
        prefix = b.encoder_inputs[row, :n_prefix].tolist()
        rest = b.targets[row][b.targets[row] != IGNORE].tolist()
        assert 1 <= n_prefix <= 15
        assert (b.encoder_inputs[row, n_prefix:] == V.pad_id).all()
        assert prefix + rest == tokens[row].tolist()
        assert b.decoder_inputs[row, 0] == V.bos_id
        assert b.decoder_inputs[row, 1 : len(rest)].tolist() == rest[:-1]


# ---------------------------------------------------------------- UL2 mixture
def test_mixture_samples_denoisers_by_weight_and_prepends_mode_tokens():
    denoisers = [Denoiser("R", 0.15, 3, weight=3), Denoiser("X", 0.5, 8, weight=1), Denoiser("S", weight=1)]
    mix = Mixture(V, seq_len=64, denoisers=denoisers)
    g = gen(8)
    tokens = ordinary(2, 64)
    modes = [mix(tokens, g).encoder_inputs[0, 0].item() for _ in range(1000)]
    counts = {m: modes.count(m) for m in V.mode_ids}
    assert within_4_sigma(counts[V.mode_ids[0]], 1000, 0.6)
    assert within_4_sigma(counts[V.mode_ids[1]], 1000, 0.2)
    assert within_4_sigma(counts[V.mode_ids[2]], 1000, 0.2)


def test_ul2_default_set_fits_model_length():
    mix = Mixture(V, seq_len=128)
    assert len(mix.members) == 7
    g = gen(0)
    for _ in range(30):
        b = mix(ordinary(2, 128), g)
        assert b.encoder_inputs.shape[1] <= mix.model_length and b.targets.shape[1] <= mix.model_length


# ---------------------------------------------------------------- determinism
@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_same_generator_state_gives_same_masks(name):
    obj = build_objective(name, V, 64, **({"whole_word": False} if name == "bart" else {}))  # V has no word starts
    tokens = ordinary(8, obj.raw_length)
    a, b, c = obj(tokens, gen(42)), obj(tokens, gen(42)), obj(tokens, gen(43))
    for field in ("encoder_inputs", "decoder_inputs", "targets", "prefix_length"):
        x, y = getattr(a, field), getattr(b, field)
        assert (x is None and y is None) or torch.equal(x, y)
    if name != "clm":  # CLM involves no randomness
        assert any(
            getattr(a, f) is not None
            and (getattr(a, f).shape != getattr(c, f).shape or not torch.equal(getattr(a, f), getattr(c, f)))
            for f in ("encoder_inputs", "decoder_inputs", "targets", "prefix_length")
        )


# ---------------------------------------------------------------- bad parameters fail at construction
@pytest.mark.parametrize(
    "make,words",
    [
        (lambda: MaskedLM(V, 64, mask_rate=0.0), ["objective.mask_rate", "hides nothing"]),
        (lambda: MaskedLM(V, 64, mask_rate=1.0), ["objective.mask_rate", "no context"]),
        (lambda: MaskedLM(V, 64, mask_rate=-0.1), ["objective.mask_rate"]),
        (lambda: MaskedLM(V, 64, mask_token_prob=1.2), ["objective.mask_token_prob", "[0, 1]"]),
        (lambda: MaskedLM(V, 64, random_token_prob=-0.1), ["objective.random_token_prob"]),
        (lambda: MaskedLM(V, 64, mask_token_prob=0.8, random_token_prob=0.3), ["sum to at most 1"]),
        (lambda: MaskedLM(V, 64, whole_word=True), ["whole_word"]),
        (lambda: SpanCorruption(V, 64, mask_rate=0.0), ["objective.mask_rate"]),
        (lambda: SpanCorruption(V, 64, mask_rate=1.0), ["objective.mask_rate"]),
        (lambda: SpanCorruption(V, 64, mean_span_length=0.5), ["objective.mean_span_length", ">= 1"]),
        (lambda: SpanCorruption(Vocab(size=1000, n_sentinels=10), 512), ["sentinels", "data.n_sentinels"]),
        (lambda: CausalLM(V, 1), ["data.seq_len", "too short"]),
        (lambda: SpanCorruption(V, 2), ["data.seq_len=2", "too short", "data.seq_len >= 3"]),
        (lambda: MaskedLM(V, 64, architecture="decoder"), ["decoder"]),
        (lambda: Mixture(V, 64, denoisers=[]), ["denoisers"]),
        (lambda: Mixture(V, 64, denoisers=[Denoiser("Q")]), ["family"]),
        (lambda: Mixture(V, 64, denoisers=[Denoiser("R", weight=0)]), ["weights"]),
    ],
)
def test_bad_parameters_fail_at_construction(make, words):
    with pytest.raises(ObjectiveError) as err:
        make()
    message = str(err.value)
    assert "\n" not in message
    for w in words:
        assert w in message


@pytest.mark.parametrize(
    "objective,architecture,reason",
    [
        ("clm", "encoder", "see its own answer"),
        ("mlm", "decoder", "right context"),
        ("span_corruption", "decoder", "encoder_decoder"),
    ],
)
def test_incompatible_pairs_are_refused_with_the_reason(objective, architecture, reason):
    assert reason in OBJECTIVES[objective].incompatibility(architecture)
    assert OBJECTIVES[objective].incompatibility(OBJECTIVES[objective].architectures[0]) is None
    with pytest.raises(ObjectiveError, match=reason):
        build_objective(objective, V, 64, architecture)


def test_vocabulary_without_ordinary_tokens_is_refused():
    with pytest.raises(ValueError, match="vocabulary size"):
        Vocab(size=50, n_sentinels=100)


# ---------------------------------------------------------------- settings no layout can honour
@pytest.mark.parametrize(
    "make,message",
    [
        (lambda: MaskedLM(V, 64, mask_rate=float("nan")), "objective.mask_rate=nan is not a finite number"),
        (lambda: MaskedLM(V, 64, mask_token_prob=float("nan")), "objective.mask_token_prob=nan"),
        (lambda: MaskedLM(V, 64, random_token_prob=float("inf")), "objective.random_token_prob=inf"),
        (lambda: SpanCorruption(V, 64, mask_rate=float("nan")), "objective.mask_rate=nan"),
        (lambda: SpanCorruption(V, 64, mean_span_length=float("nan")), "objective.mean_span_length=nan"),
        # 0.6 at mean 1: 38 spans over 64 tokens need 38 kept tokens between them, 25 are left
        (lambda: SpanCorruption(V, 64, mask_rate=0.6, mean_span_length=1), "into 38 noise spans but keeps only 25"),
        (
            lambda: Mixture(
                V, 64, denoisers=[{"family": "R"}, {"family": "X", "mask_rate": 0.6, "mean_span_length": 1}]
            ),
            r"objective.denoisers\[1\].mask_rate=0.6",
        ),
        (
            lambda: Mixture(V, 512, denoisers=[{"family": "X", "mask_rate": 0.5, "mean_span_length": 2}]),
            r"lower data.seq_len / objective.denoisers\[0\].mask_rate",
        ),  # more sentinels than the vocabulary has
    ],
)
def test_settings_no_layout_can_honour_are_refused_at_construction(make, message):
    with pytest.raises(ObjectiveError, match=message):
        make()


def test_span_corruption_refuses_padded_windows():
    span = SpanCorruption(V, 30)
    tokens = ordinary(2, span.raw_length)
    tokens[1, -5:] = V.pad_id
    with pytest.raises(ObjectiveError, match="packed windows without padding"):
        span(tokens, gen())


@pytest.mark.parametrize("architecture", ["decoder", "encoder_decoder"])
def test_prefix_lm_keeps_its_prefix_before_the_padding(architecture):
    prefix = PrefixLM(V, 16, architecture)
    tokens = ordinary(64, prefix.raw_length, seed=3)
    real = torch.randint(3, prefix.raw_length, (64,), generator=gen(4))
    tokens = tokens.masked_fill(torch.arange(prefix.raw_length)[None] >= real[:, None], V.pad_id)
    batch = prefix(tokens, gen(5))
    if architecture == "decoder":
        assert (batch.prefix_length <= real - 1).all()  # the bidirectional part holds no padding
        assert not (batch.targets == V.pad_id).any()
    else:
        assert not (batch.encoder_inputs[batch.encoder_mask] == V.pad_id).any()
        assert not (batch.targets == V.pad_id).any() and (batch.encoder_mask.sum(1) >= 1).all()
    full = ordinary(64, prefix.raw_length, seed=3)  # no padding: the draws are those of an unpadded batch
    assert torch.equal(prefix(full, gen(5)).targets, prefix(full, gen(5)).targets)
