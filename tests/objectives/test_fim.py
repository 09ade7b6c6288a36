"""Fill-in-the-middle (objective=fim): the rearrangement is exact (the parts reassemble to the window, sentinels in
PSM's and SPM's order), its rates and cut points follow their laws within +-4 sigma, the loss is CLM's over the
rearranged text, and the vocabulary's FIM tokens are where the tokenizer puts them."""

import math

import pytest
import torch

from selfsup.data.tokenizer import train_tokenizer, vocab_from_tokenizer
from selfsup.data.vocab import FIM_SPECIALS, Vocab, special_tokens
from selfsup.objectives import IGNORE, CausalLM, ObjectiveError, build_objective

V = Vocab(size=1000, n_sentinels=10)
PRE, MID, SUF = V.fim_ids
ORD = V.first_ordinary


def windows(B, R, seed=0):
    return torch.randint(ORD, V.size, (B, R), generator=torch.Generator().manual_seed(seed))


def parts(row: list[int]) -> tuple[str, list[int], list[int], list[int]]:
    """(order, prefix, middle, suffix) of a rearranged row (padding dropped)."""
    row = [t for t in row if t != V.pad_id]
    assert row[0] == PRE and row.count(PRE) == row.count(MID) == row.count(SUF) == 1
    s, m = row.index(SUF), row.index(MID)
    if s == 1:  # SPM: <pre> <suf> suffix <mid> prefix+middle (the cut between them is not in the row)
        return "spm", [], row[m + 1 :], row[2:m]
    return "psm", row[1:s], row[m + 1 :], row[s + 1 : m]


def test_each_rearranged_window_reassembles_to_its_text_in_psm_or_spm_order():
    fim = build_objective("fim", V, 32, fim_rate=1.0)
    tokens = windows(400, fim.raw_length)
    tokens[:50, 20:] = V.pad_id  # short rows: the end of a corpus
    rows, read = fim.rearrange(tokens, torch.Generator().manual_seed(1))
    orders = set()
    for b in range(len(tokens)):
        order, prefix, middle, suffix = parts(rows[b].tolist())
        orders.add(order)
        n = min(int((tokens[b] != V.pad_id).sum()), fim.raw_length - 3)
        assert prefix + middle + suffix == tokens[b, :n].tolist()
        assert int(read[b]) == n and int((rows[b] != V.pad_id).sum()) == n + 3
    assert orders == {"psm", "spm"}


def test_psm_and_spm_rows_are_exactly_the_papers_layouts():
    d = list(range(ORD, ORD + 10))  # prefix d[:3], middle d[3:7], suffix d[7:]
    fim = build_objective("fim", V, 12)
    tokens = torch.tensor([d + [ORD + 50] * 3] * 2)  # 13 raw tokens: the last 3 make room for the sentinels
    i, j, n = (torch.tensor([v, v]) for v in (3, 7, 10))
    rows = fim.layout(tokens, n, i, j, spm=torch.tensor([False, True]))
    assert rows[0].tolist() == [PRE, *d[:3], SUF, *d[7:], MID, *d[3:7]]  # PSM
    assert rows[1].tolist() == [PRE, SUF, *d[7:], MID, *d[:3], *d[3:7]]  # SPM (run_fim.py's, the paper's appendix D)
    empty = fim.layout(tokens, n, torch.tensor([0, 10]), torch.tensor([10, 10]), spm=torch.tensor([False, False]))
    assert empty[0].tolist() == [PRE, SUF, MID, *d] and empty[1].tolist() == [PRE, *d, SUF, MID]  # empty parts


def test_the_rates_and_the_cut_points_follow_their_laws_within_4_sigma():
    N, R = 100_000, 33
    n = R - 3
    m = n + 1  # a cut point takes the values 0..n, each with probability 1/m
    values = torch.arange(m, dtype=torch.float64)
    p_min = ((m - values) ** 2 - (m - values - 1) ** 2) / m**2  # P(the smaller of two cut points = v)
    fim = build_objective("fim", V, 32, fim_rate=0.6, spm_rate=0.3)
    rows, read = fim.rearrange(windows(N, R), torch.Generator().manual_seed(2))
    rearranged = rows[:, 0] == PRE
    k = int(rearranged.sum())
    assert abs(k - 0.6 * N) < 4 * math.sqrt(N * 0.6 * 0.4)
    assert torch.equal(read[~rearranged], torch.full_like(read[~rearranged], R)) and (read[rearranged] == n).all()
    # <pre> <suf> first: SPM, or PSM with an empty prefix (the same row)
    p = 0.3 + 0.7 * float(p_min[0])
    assert abs(int((rows[rearranged, 1] == SUF).sum()) - p * k) < 4 * math.sqrt(k * p * (1 - p))
    # PSM alone: the prefix is the smaller of the two cut points, the middle their distance
    psm = build_objective("fim", V, 32, fim_rate=1.0, spm_rate=0.0).rearrange(windows(N, R, 3), torch.Generator())[0]
    prefix = (psm == SUF).float().argmax(1) - 1
    middle = n + 2 - (psm == MID).float().argmax(1)
    mean_min = (values * p_min).sum()
    mean_distance = (m**2 - 1) / (3 * m)  # E|X - Y| for X, Y uniform on 0..n; E(X - Y)^2 = (m^2 - 1) / 6
    for observed, mean, var in (
        (prefix, mean_min, (values**2 * p_min).sum() - mean_min**2),
        (middle, mean_distance, (m**2 - 1) / 6 - mean_distance**2),
    ):
        assert abs(observed.double().mean() - float(mean)) < 4 * math.sqrt(float(var) / N)


def test_the_loss_is_the_next_token_loss_over_the_whole_rearranged_row_and_a_rate_of_0_is_clm():
    fim = build_objective("fim", V, 32)
    tokens = windows(64, fim.raw_length)
    tokens[0, 10:] = V.pad_id
    batch = fim(tokens, torch.Generator().manual_seed(3))
    rows, read = fim.rearrange(tokens, torch.Generator().manual_seed(3))
    assert torch.equal(batch.decoder_inputs, rows[:, :-1])
    assert torch.equal(batch.targets, rows[:, 1:].masked_fill(rows[:, 1:] == V.pad_id, IGNORE))
    assert int(batch.n_inputs) == int(read.sum())  # text tokens read: sentinels are not text
    assert int(batch.n_scored) == int((rows[:, 1:] != V.pad_id).sum())  # sentinels after the first are scored
    none = build_objective("fim", V, 32, fim_rate=0.0)(tokens, torch.Generator().manual_seed(3))
    clm = CausalLM(V, 32)(tokens, torch.Generator())
    assert torch.equal(none.targets, clm.targets) and torch.equal(none.decoder_inputs, clm.decoder_inputs)
    assert int(none.n_inputs) == int(clm.n_inputs)


def test_bad_settings_and_vocabularies_are_refused_in_one_line():
    with pytest.raises(ObjectiveError, match=r"objective.fim_rate=1.5 is out of range"):
        build_objective("fim", V, 32, fim_rate=1.5)
    with pytest.raises(ObjectiveError, match=r"objective=fim cannot train architecture=encoder"):
        build_objective("fim", V, 32, architecture="encoder")
    with pytest.raises(ObjectiveError, match=r"needs the tokens <fim_prefix> <fim_middle> <fim_suffix>"):
        build_objective("fim", Vocab(size=1000, n_sentinels=10, fim=False), 32)
    with pytest.raises(ObjectiveError, match=r"data.seq_len=2 leaves no text"):
        build_objective("fim", V, 2)


def test_the_tokenizer_puts_the_fim_tokens_after_the_sentinels_and_an_older_one_has_none():
    docs = ["The module returns a list of the files it found."] * 30
    tokenizer = train_tokenizer(docs, 400, n_sentinels=5)
    vocab = vocab_from_tokenizer(tokenizer, 5)
    assert vocab.fim and [tokenizer.id_to_token(i) for i in vocab.fim_ids] == list(FIM_SPECIALS)
    assert vocab.first_ordinary == len(special_tokens(5)) == 7 + 5 + 3
    assert tokenizer.encode("<fim_prefix>").ids != [vocab.fim_ids[0]]  # in the text, it is text
    old = vocab_from_tokenizer(_without_fim(tokenizer), 5)  # a run dir's tokenizer of an earlier version
    assert not old.fim and old.first_ordinary == old.sentinel_end == 12
    with pytest.raises(ValueError, match="no fill-in-the-middle tokens"):
        old.fim_ids


def _without_fim(tokenizer):
    """The tokenizer as the lab made it before the FIM tokens: those three ids are ordinary tokens' names."""
    import json

    from tokenizers import Tokenizer

    data = json.loads(tokenizer.to_str())
    renamed = {name: f"old{i}" for i, name in enumerate(FIM_SPECIALS)}
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] not in renamed]
    data["model"]["vocab"] = {renamed.get(k, k): v for k, v in data["model"]["vocab"].items()}
    return Tokenizer.from_str(json.dumps(data))
