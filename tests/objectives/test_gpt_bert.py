"""GPT-BERT (objective=gpt_bert) after ltgoslo/gpt-bert: masked batches hide tokens as MLM does and score each from
the position before it with bidirectional attention; causal batches are CLM's; the share of causal batches, the
hidden share and the 80/10/10 split follow their laws within +-4 sigma; the mask rate moves 0.3 -> 0.15."""

import math

import pytest
import torch

from selfsup.data.vocab import Vocab
from selfsup.models import build_model
from selfsup.objectives import IGNORE, CausalLM, ObjectiveError, build_objective

V = Vocab(size=1000, n_sentinels=10)
ORD = V.first_ordinary


def windows(B, R, seed=0):
    return torch.randint(ORD, V.size, (B, R), generator=torch.Generator().manual_seed(seed))


def test_a_masked_batch_scores_each_hidden_token_from_the_position_before_it():
    gb = build_objective("gpt_bert", V, 64, causal_fraction=0.0, schedule={"shape": "constant"})
    tokens = windows(400, gb.raw_length)
    tokens[0, 40:] = V.pad_id
    batch = gb(tokens, torch.Generator().manual_seed(1))
    inputs, targets = batch.decoder_inputs, batch.targets
    assert inputs.shape == targets.shape == (400, 64)
    hidden = targets != IGNORE  # target t is token t + 1, scored where token t + 1 was hidden
    assert torch.equal(targets[hidden], tokens[:, 1:][hidden])
    changed = inputs[:, 1:] != tokens[:, 1:-1]  # an input differs from its token only where the token was hidden
    assert not (changed & ~hidden[:, :-1]).any()
    assert torch.equal(inputs[:, 0], tokens[:, 0])  # the first token is never hidden: the context of the second
    assert ((inputs[:, 1:] == V.mask_id) <= hidden[:, :-1]).all()
    assert torch.equal(batch.prefix_length, (inputs != V.pad_id).sum(1))  # bidirectional over the real tokens
    assert int(batch.prefix_length[0]) == 40 and (batch.prefix_length[1:] == 64).all()
    assert not hidden[0, 39:].any()  # padding is never hidden, nor scored
    # the share hidden and the 80/10/10 split (the last token's input is dropped: its split is not seen)
    n = int((tokens[1:, 1:] != V.pad_id).sum())
    k = int(hidden[1:].sum())
    assert abs(k - 0.3 * n) < 4 * math.sqrt(n * 0.3 * 0.7)
    seen = hidden[1:, :-1]
    read = inputs[1:, 1:][seen]
    m = int(seen.sum())
    for found, p in (
        (int((read == V.mask_id).sum()), 0.8),
        (int((read == tokens[1:, 1:-1][seen]).sum()), 0.1 + 0.1 / (V.size - ORD)),
    ):
        assert abs(found - p * m) < 4 * math.sqrt(m * p * (1 - p))


def test_causal_batches_are_clms_and_come_at_the_causal_fraction_within_4_sigma():
    gb = build_objective("gpt_bert", V, 16, causal_fraction=0.25)
    tokens = windows(2, gb.raw_length)
    clm = CausalLM(V, 16)(tokens, torch.Generator())
    generator, causal, N = torch.Generator().manual_seed(3), 0, 4000
    for _ in range(N):
        batch = gb(tokens, generator)
        if batch.prefix_length is None:
            causal += 1
            assert torch.equal(batch.targets, clm.targets) and torch.equal(batch.decoder_inputs, clm.decoder_inputs)
        else:
            assert (batch.prefix_length == 16).all()
    assert abs(causal - 0.25 * N) < 4 * math.sqrt(N * 0.25 * 0.75)
    assert int(gb(tokens, generator).n_inputs) == int(clm.n_inputs) == 34


def test_attention_is_bidirectional_in_a_masked_batch_and_causal_in_a_causal_one():
    torch.manual_seed(0)
    model = build_model("decoder", V.size, 32, d_model=16, n_layers=2, n_heads=2).eval()
    x = windows(1, 32)
    y = x.clone()
    y[0, 20] = ORD + 1 if x[0, 20] != ORD + 1 else ORD + 2  # a later token changed
    with torch.no_grad():
        both = [model(decoder_inputs=t, prefix_length=torch.tensor([32])) for t in (x, y)]
        left = [model(decoder_inputs=t) for t in (x, y)]
        ones = model.decoder(model._embed(x, "decoder_inputs"), mask=torch.ones(1, 1, 32, 32, dtype=torch.bool))
    assert not torch.allclose(both[0][0, 10], both[1][0, 10])  # position 10 reads position 20
    assert torch.allclose(left[0][0, :20], left[1][0, :20])  # causal: nothing before 20 reads it
    assert torch.allclose(both[0], ones, atol=1e-6)  # every row bidirectional: the same as an all-True mask


def test_the_mask_rate_moves_from_0_3_to_0_15_and_validation_masks_at_the_end():
    gb = build_objective("gpt_bert", V, 16, schedule={"shape": "linear", "end": 0.15})
    assert gb.at_step(0, 1000) == pytest.approx(0.3) and gb.mask_rate == pytest.approx(0.3)
    assert gb.at_step(500, 1000) == pytest.approx(0.225)
    assert gb.at_step(None) == pytest.approx(0.15)


def test_bad_settings_are_refused_in_one_line():
    with pytest.raises(ObjectiveError, match=r"objective.causal_fraction=1.5 is out of range"):
        build_objective("gpt_bert", V, 16, causal_fraction=1.5)
    with pytest.raises(ObjectiveError, match=r"objective=gpt_bert cannot train architecture=encoder"):
        build_objective("gpt_bert", V, 16, architecture="encoder")


def test_pairs_are_scored_by_mntp_each_token_masked_and_read_from_the_position_before_it():
    from selfsup.evaluation.scoring import mntp_rows, score_rows

    torch.manual_seed(0)
    model = build_model("decoder", V.size, 32, d_model=16, n_layers=2, n_heads=2).eval()
    sentences = [[ORD + 5, ORD + 9, ORD + 2], [ORD + 7, ORD + 1]]
    rows = mntp_rows(sentences, V)
    assert rows.bidirectional and rows.decoder[1] == [V.eos_id, ORD + 5, V.mask_id, ORD + 2, V.eos_id]
    assert rows.scored[1] == [(1, ORD + 9)] and rows.sentence == [0, 0, 0, 1, 1]
    found = score_rows(model, rows, 2, V.pad_id)
    by_hand = []
    for ids in sentences:
        total = 0.0
        for i, t in enumerate(ids):
            row = [V.eos_id, *ids, V.eos_id]
            row[i + 1] = V.mask_id
            with torch.no_grad():  # alone in its batch: no padding, every token reads every other
                hidden = model(decoder_inputs=torch.tensor([row]), prefix_length=torch.tensor([len(row)]))
            total += model.head(hidden)[0, i].float().log_softmax(-1)[t].item()
        by_hand.append(total)
    assert found == pytest.approx(by_hand, abs=1e-5)  # batched with padding: the same scores
