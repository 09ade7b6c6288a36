"""BART denoising (objective=bart) against fairseq's DenoisingDataset: target = original, the mask budget, the
span-length law, zero-length spans as insertions, sentence permutation, within +-4 sigma where random."""

import itertools
import math
from collections import Counter

import numpy as np
import pytest
import torch

from selfsup.data.vocab import Vocab
from selfsup.objectives import BartDenoising, ObjectiveError, build_objective
from selfsup.objectives.denoising import poisson_table

SIZE = 1000
FULL_STOP = 990  # the '.' token of these tests
WORD_START = torch.arange(SIZE) % 3 != 0  # ids divisible by 3 continue a word
V = Vocab(size=SIZE, n_sentinels=10, word_start=WORD_START, full_stop=torch.arange(SIZE) == FULL_STOP)
ORD = V.first_ordinary


def ordinary(B, L, seed=1):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(ORD, SIZE - 10, (B, L), generator=g)
    return tokens


def bart(seq_len=65, **settings):
    settings = {"permute_sentences": 0.0, **settings}
    return build_objective("bart", V, seq_len, **settings)


def test_the_decoder_reads_the_original_and_is_scored_on_every_token_and_eos():
    tokens = ordinary(8, 64)
    batch = bart(permute_sentences=1.0)(tokens, torch.Generator().manual_seed(0))
    assert torch.equal(batch.targets, torch.cat([tokens, torch.full((8, 1), V.eos_id)], dim=1))
    assert torch.equal(batch.decoder_inputs, torch.cat([torch.full((8, 1), V.bos_id), tokens], dim=1))
    assert batch.n_scored.item() == 8 * 65 and batch.n_inputs.item() == 8 * 64
    # the encoder: each row's corrupted text then </s>, padded to the longest, the mask True on the real tokens
    lengths = batch.encoder_mask.sum(dim=1)
    assert batch.encoder_inputs.shape[1] == lengths.max()
    for row, n in zip(batch.encoder_inputs, lengths):
        assert row[n - 1] == V.eos_id and (row[n:] == V.pad_id).all() and (row[: n - 1] != V.pad_id).all()


# fairseq/data/denoising_dataset.py (commit 003179f), transcribed: add_whole_word_mask with replace_length=1 and
# span-poisson lengths, add_insertion_noise, permute_sentences; a source is <s> text </s>, as there
def fairseq_table(lam):
    ps, power, factorial = [], 1, 1
    for k in range(0, 128):
        ps.append(math.exp(-lam) * power / factorial)
        power *= lam
        factorial *= k + 1
        if ps[-1] < 0.0000001:
            break
    return torch.FloatTensor(ps)


def fairseq_insertion(tokens, p, random_ratio):
    num_tokens = len(tokens)
    n = int(math.ceil(num_tokens * p))
    noise_indices = torch.randperm(num_tokens + n - 2)[:n] + 1
    noise_mask = torch.zeros(size=(num_tokens + n,), dtype=torch.bool)
    noise_mask[noise_indices] = 1
    result = torch.LongTensor(n + len(tokens)).fill_(-1)
    num_random = int(math.ceil(n * random_ratio))
    result[noise_indices[num_random:]] = V.mask_id
    result[noise_indices[:num_random]] = torch.randint(low=ORD, high=SIZE, size=(num_random,))
    result[~noise_mask] = tokens
    return result


def fairseq_mask(source, p, lam=3.0, random_ratio=0.1):
    distribution = torch.distributions.Categorical(fairseq_table(lam))
    is_word_start = WORD_START[source].long()
    is_word_start[0] = 0
    is_word_start[-1] = 0
    num_to_mask = int(math.ceil(is_word_start.float().sum() * p))
    num_inserts = 0
    lengths = distribution.sample(sample_shape=(num_to_mask,))
    cum_length = torch.cumsum(lengths, 0)
    while cum_length[-1] < num_to_mask:
        lengths = torch.cat([lengths, distribution.sample(sample_shape=(num_to_mask,))], dim=0)
        cum_length = torch.cumsum(lengths, 0)
    i = 0
    while cum_length[i] < num_to_mask:
        i += 1
    lengths[i] = num_to_mask - (0 if i == 0 else cum_length[i - 1])
    num_to_mask = i + 1
    lengths = lengths[:num_to_mask]
    lengths = lengths[lengths > 0]
    num_inserts = num_to_mask - lengths.size(0)
    num_to_mask -= num_inserts
    if num_to_mask == 0:
        return fairseq_insertion(source, num_inserts / source.size(0), random_ratio)
    word_starts = is_word_start.nonzero(as_tuple=False)
    indices = word_starts[torch.randperm(word_starts.size(0))[:num_to_mask]].squeeze(1)
    mask_random = torch.FloatTensor(num_to_mask).uniform_() < random_ratio
    to_keep = torch.ones(source.size(0), dtype=torch.bool)
    is_word_start[-1] = 255
    source = source.clone()
    source[indices] = V.mask_id
    source[indices[mask_random]] = torch.randint(ORD, SIZE, size=(int(mask_random.sum()),))
    lengths -= 1
    while indices.size(0) > 0:
        lengths -= is_word_start[indices + 1].long()
        uncompleted = lengths >= 0
        indices = indices[uncompleted] + 1
        lengths = lengths[uncompleted]
        to_keep[indices] = 0
    source = source[to_keep]
    if num_inserts > 0:
        source = fairseq_insertion(source, num_inserts / source.size(0), random_ratio)
    return source


def test_the_span_length_table_is_fairseqs():
    for lam in (1.0, 3.0, 3.5):
        expected = fairseq_table(lam)
        assert np.allclose(poisson_table(lam), (expected / expected.sum()).numpy(), atol=1e-7)
    assert len(poisson_table(3.0)) == len(fairseq_table(3.0)) == 18  # k = 0..17: p_17 < 1e-7 ends it


def difference_within_4_sigma(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    sigma = math.sqrt(a.var() / len(a) + b.var() / len(b))
    return abs(a.mean() - b.mean()) <= 4 * sigma, (a.mean(), b.mean(), sigma)


@pytest.mark.parametrize(
    "rate,lam", [(0.3, 3.0), pytest.param(0.5, 3.0, marks=pytest.mark.slow), (0.3, 0.05)]
)  # 0.5: the same law at another budget
def test_text_infilling_matches_fairseqs_laws(rate, lam):
    """Over 600 windows each: the <mask> tokens, the corrupted length and the word pieces kept have the means of
    fairseq's add_whole_word_mask on the same text (<s> text </s> there), within 4 sigma. At lambda 0.05, 95% of
    the spans have length 0: most <mask> tokens are insertions."""
    n, L = 600, 64
    tokens = ordinary(n, L, seed=2)
    objective = bart(L + 1, mask_rate=rate, poisson_lambda=lam)
    ours = objective(tokens, torch.Generator().manual_seed(3))
    assert ours.encoder_inputs.shape[1] < objective.model_length
    torch.manual_seed(4)
    theirs = [
        fairseq_mask(torch.cat([torch.tensor([V.bos_id]), row, torch.tensor([V.eos_id])]), rate, lam) for row in tokens
    ]
    our_rows = [row[: m.sum() - 1] for row, m in zip(ours.encoder_inputs, ours.encoder_mask)]
    their_rows = [row[1:-1] for row in theirs]
    for name, measure in (
        ("masks", lambda r: int((r == V.mask_id).sum())),
        ("length", len),
        ("kept", lambda r: int(((r >= ORD) & ~WORD_START[r.clamp(0, SIZE - 1)]).sum())),
    ):
        ok, numbers = difference_within_4_sigma([measure(r) for r in our_rows], [measure(r) for r in their_rows])
        assert ok, (name, numbers)


def test_span_lengths_follow_poisson_and_zero_length_spans_come_at_its_rate():
    """The spans of a budget sum to it exactly. The first span of each draw (a budget of 200 words: never cut) has
    a Poisson(3) length given > 0; a zero-length span is drawn at Poisson's p_0, so before the m spans of length
    > 0 come NegBin(m, p_0) zero-length ones (each inserts a <mask>)."""
    objective = bart(401, whole_word=False)
    rng = np.random.default_rng(0)
    first, inserts, spans = Counter(), 0, 0
    n = 4000
    for _ in range(n):
        drawn, zero = objective.span_lengths(200, rng)
        assert drawn.sum() == 200 and (drawn > 0).all()
        first[int(drawn[0])] += 1
        inserts, spans = inserts + zero, spans + len(drawn)
    table = poisson_table(3.0)
    for k in (1, 2, 3, 4, 6):
        p = table[k] / (1 - table[0])
        assert abs(first[k] - n * p) <= 4 * math.sqrt(n * p * (1 - p)), k
    p0 = table[0]
    mean, var = spans * p0 / (1 - p0), spans * p0 / (1 - p0) ** 2
    assert abs(inserts - mean) <= 4 * math.sqrt(var), (inserts, mean)


def test_full_permutation_puts_the_sentences_in_each_order_equally_often():
    """ "a b . | c . . d | e f g": a sentence ends after the first full stop of a run; the last runs to the end."""
    objective = bart(11, permute_sentences=1.0)
    row = np.array([1, 2, FULL_STOP, 3, FULL_STOP, FULL_STOP, 4, 5, 6, 7])
    parts = [row[0:3], row[3:5], row[5:10]]
    layouts = {tuple(np.concatenate([parts[i] for i in p]).tolist()): p for p in itertools.permutations(range(3))}
    rng = np.random.default_rng(0)
    n = 6000
    orders = Counter(layouts[tuple(row[objective.sentence_order(row == FULL_STOP, rng)].tolist())] for _ in range(n))
    assert len(orders) == 6
    for layout, count in orders.items():
        assert abs(count - n / 6) <= 4 * math.sqrt(n / 6 * 5 / 6), (layout, count)


def test_half_the_sentences_permuted_leaves_two_of_four_in_place_half_the_time():
    objective = bart(9, permute_sentences=0.5)  # ceil(4 * 0.5) = 2 sentences chosen, swapped or not
    stops = np.array([0, 1, 0, 1, 0, 1, 0, 0], dtype=bool)
    rng = np.random.default_rng(1)
    n = 4000
    same = sum(np.array_equal(objective.sentence_order(stops, rng), np.arange(8)) for _ in range(n))
    assert abs(same - n / 2) <= 4 * math.sqrt(n / 4)


def test_special_tokens_are_never_hidden_and_stop_a_span():
    tokens = ordinary(500, 64, seed=5)
    tokens[:, 20] = V.eos_id  # a document boundary inside each window
    batch = bart(65, mask_rate=0.5)(tokens, torch.Generator().manual_seed(0))
    for row, m in zip(batch.encoder_inputs, batch.encoder_mask):
        assert int((row[: m.sum() - 1] == V.eos_id).sum()) == 1


def test_insertion_adds_its_share_of_masks_never_first_or_last():
    objective = bart(65, mask_rate=0.01, insert_rate=0.25, random_rate=0.0, whole_word=False)
    rng = np.random.default_rng(0)
    row = np.arange(ORD, ORD + 40)
    for _ in range(200):
        out = objective.insert(row, 10, rng)
        assert len(out) == 50 and (out[out != V.mask_id] == row).all()
        assert out[0] != V.mask_id and out[-1] != V.mask_id and (out == V.mask_id).sum() == 10
    assert objective.model_length > 65 + math.ceil(65 * 0.25)


def test_the_mask_rate_schedule_sets_each_steps_budget():
    objective = bart(65, mask_rate=0.4, schedule={"shape": "linear", "end": 0.2, "steps": 10}, whole_word=False)
    assert objective.at_step(5, 10) == pytest.approx(0.3) and objective.mask_rate == pytest.approx(0.3)
    assert objective.at_step(None) == pytest.approx(0.2)
    # the model's positions cover the longer rows of the schedule's higher end
    assert objective.model_length == bart(65, mask_rate=0.4).model_length > bart(65, mask_rate=0.2).model_length


def test_same_generator_state_gives_the_same_corruption():
    tokens = ordinary(16, 64)
    a = bart(permute_sentences=1.0)(tokens, torch.Generator().manual_seed(7))
    b = bart(permute_sentences=1.0)(tokens, torch.Generator().manual_seed(7))
    assert torch.equal(a.encoder_inputs, b.encoder_inputs)


@pytest.mark.parametrize(
    "settings,words",
    [
        ({"poisson_lambda": 0.0}, "objective.poisson_lambda=0.0 must be > 0"),
        ({"mask_rate": 1.0}, "objective.mask_rate=1.0 is out of range"),
        ({"permute_sentences": 1.5}, "objective.permute_sentences=1.5 is out of range"),
        ({"architecture": "decoder"}, "objective=bart cannot train architecture=decoder"),
    ],
)
def test_bad_settings_are_refused_in_one_line(settings, words):
    architecture = settings.pop("architecture", None)
    with pytest.raises(ObjectiveError, match=words.replace("(", r"\(").replace(".", r"\.")):
        BartDenoising(V, 65, architecture, **settings)


def test_whole_words_need_word_start_markers():
    with pytest.raises(ObjectiveError, match="objective.whole_word=true needs"):
        BartDenoising(Vocab(size=SIZE, n_sentinels=10), 65)
