"""Generation jobs' scores: each family writes (source, target) as it was pretrained to, the target's teacher-forced
loss equals the dense computation, greedy decoding never reads the target, an encoder is refused, and exact match /
token F1 are SQuAD's (torchmetrics' `squad` on the same texts)."""

import pytest
import torch
import torch.nn.functional as F
from torchmetrics.functional.text import squad

from selfsup.evaluation.generation import (
    IGNORE,
    NOT_A_WRITER,
    exact_match,
    greedy,
    target_loss,
    token_f1,
    write,
)
from selfsup.evaluation.tasks import EvalError
from selfsup.models.transformer import build_model

BOS, EOS, PAD = 1, 2, 0
SOURCES = [[5, 6, 7, 8], [9, 10]]
TARGETS = [[11, 12], [13, 14, 15]]


def model_of(family: str) -> torch.nn.Module:
    """An untrained model whose output head is untied from its embeddings (a tied one, untrained, mostly writes
    back the token it reads), so that greedy decoding writes varied tokens."""
    torch.manual_seed(0)
    model = build_model(family, 40, 24, d_model=32, n_layers=2, n_heads=4).eval()
    model.lm_head = torch.nn.Linear(32, model.lm_head.out_features, bias=False)
    return model


# ---------------------------------------------------------------------------------------- SQuAD's scores
@pytest.mark.parametrize(
    "prediction,reference,em,f1",
    [
        ("The cat sat.", "cat sat", 1.0, 1.0),  # articles, case and punctuation do not count
        ("the black cat", "a cat", 0.0, 2 / 3),  # precision 1/2, recall 1
        ("cat cat dog", "cat dog dog", 0.0, 2 / 3),  # words counted with their multiplicity
        ("", "the", 1.0, 1.0),  # both empty once normalised
        ("", "cat", 0.0, 0.0),
        ("os.path", "ospath", 1.0, 1.0),  # punctuation removed inside words, as SQuAD does
        ("dog", "cat", 0.0, 0.0),
    ],
)
def test_exact_match_and_token_f1_are_squads(prediction, reference, em, f1):
    assert exact_match(prediction, reference) == em
    assert token_f1(prediction, reference) == pytest.approx(f1)
    theirs = squad(
        [{"prediction_text": prediction, "id": "0"}],
        [{"answers": {"answer_start": [0], "text": [reference]}, "id": "0"}],
    )
    assert float(theirs["exact_match"]) / 100 == pytest.approx(em)
    assert float(theirs["f1"]) / 100 == pytest.approx(f1)


# ---------------------------------------------------------------------------------------- writing
def test_each_writer_lays_out_source_and_target_as_it_was_pretrained():
    decoder = write("decoder", SOURCES, TARGETS, EOS, BOS, PAD)
    assert decoder.inputs.tolist() == [[5, 6, 7, 8, EOS, 11, 12], [9, 10, EOS, 13, 14, 15, PAD]]
    assert decoder.labels.tolist() == [
        [IGNORE, IGNORE, IGNORE, IGNORE, 11, 12, EOS],
        [IGNORE, IGNORE, 13, 14, 15, EOS, IGNORE],
    ]
    assert decoder.encoder_inputs is None
    encdec = write("encoder_decoder", SOURCES, TARGETS, EOS, BOS, PAD)
    assert encdec.encoder_inputs.tolist() == [[5, 6, 7, 8, EOS], [9, 10, EOS, PAD, PAD]]
    assert encdec.encoder_mask.tolist() == [[True] * 5, [True] * 3 + [False] * 2]
    assert encdec.inputs.tolist() == [[BOS, 11, 12, PAD], [BOS, 13, 14, 15]]
    assert encdec.labels.tolist() == [[11, 12, EOS, IGNORE], [13, 14, 15, EOS]]
    # the encoder never reads the target
    assert not set(sum(TARGETS, [])) & set(encdec.encoder_inputs.flatten().tolist())


def test_an_encoder_is_refused_with_a_line_that_says_why():
    with pytest.raises(EvalError, match=f"^{NOT_A_WRITER}: a generation job scores decoders and encoder-decoders"):
        write("encoder", SOURCES, TARGETS, EOS, BOS, PAD)
    with pytest.raises(EvalError, match=NOT_A_WRITER):
        greedy(model_of("encoder"), SOURCES, EOS, BOS, PAD, 4)


# ---------------------------------------------------------------------------------------- teacher forcing
@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
def test_the_target_loss_is_the_dense_computation_on_each_example_alone(family):
    model = model_of(family)
    with torch.no_grad():
        summed, count = target_loss(model, write(family, SOURCES, TARGETS, EOS, BOS, PAD))
        for i, (source, target) in enumerate(zip(SOURCES, TARGETS)):
            goal = [*target, EOS]
            if family == "decoder":
                stream = torch.tensor([[*source, EOS, *target]])
                log_p = F.log_softmax(model.head(model(decoder_inputs=stream))[0], -1)
                rows = range(len(source), len(source) + len(goal))  # the positions that predict the target
            else:
                hidden = model(
                    encoder_inputs=torch.tensor([[*source, EOS]]), decoder_inputs=torch.tensor([[BOS, *target]])
                )
                log_p = F.log_softmax(model.head(hidden)[0], -1)
                rows = range(len(goal))
            expected = -sum(float(log_p[r, token]) for r, token in zip(rows, goal))
            assert int(count[i]) == len(goal)
            assert float(summed[i]) == pytest.approx(expected, rel=1e-5)


# ---------------------------------------------------------------------------------------- greedy decoding
@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
@pytest.mark.parametrize("eos", [EOS, 39])  # 39: an end token the untrained model seldom writes, so it runs long
def test_greedy_decoding_is_the_argmax_from_the_source_alone(family, eos):
    model = model_of(family)
    sources = [*SOURCES, [3, 4, 5], [30, 31, 32]]  # two of one length: written in one batch
    written = greedy(model, sources, eos, BOS, PAD, max_new_tokens=5)
    for source, tokens in zip(sources, written):
        assert len(tokens) <= 5 and eos not in tokens
        with torch.no_grad():  # by hand: one example, one token at a time
            ids = [*source, eos] if family == "decoder" else [BOS]
            expected = []
            for _ in range(5):
                if family == "decoder":
                    hidden = model(decoder_inputs=torch.tensor([ids]))
                else:
                    hidden = model(encoder_inputs=torch.tensor([[*source, eos]]), decoder_inputs=torch.tensor([ids]))
                token = int(model.head(hidden[0, -1]).argmax())
                if token == eos:
                    break
                expected.append(token)
                ids.append(token)
        assert tokens == expected
    if eos == 39:
        assert sum(map(len, written)) >= 10  # the loop ran: not every example stopped at once


@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
def test_greedy_decoding_stops_at_the_models_length(family):
    model = model_of(family)  # max_len 24
    source = list(range(3, 23))  # 20 tokens: `source eos` is 21 of 24, so the decoder writes at most 4 (the last
    # from a full stream)
    (tokens,) = greedy(model, [source], EOS, BOS, PAD, max_new_tokens=50)
    assert len(tokens) <= (4 if family == "decoder" else 24)


# ---------------------------------------------------------------------------------------- the built-in jobs' data
def test_the_builtin_continuation_job_is_held_out_sentences_cut_in_half():
    from selfsup.data.builtin import builtin_documents
    from selfsup.evaluation.builtin import continuation_examples, probe_sentences

    examples = continuation_examples(0.2)
    held = set(probe_sentences())
    text = " ".join(" ".join(doc.split()) for doc in builtin_documents())
    sentences = [f"{source} {target}" for source, target, _ in examples]
    assert len(set(sentences)) == len(examples) and set(sentences) <= held  # each held-out sentence at most once
    for source, target, _ in examples:
        assert len(source.split()) == (len(source.split()) + len(target.split())) // 2 >= 3
        assert target not in text  # no target was seen in pretraining
    left_out = len(held) - len(examples)
    assert 0 < left_out < 0.1 * len(held)  # the few whose rest the corpus holds verbatim
    n, share = len(examples), sum(t for _, _, t in examples) / len(examples)
    assert abs(share - 0.2) < 4 * (0.2 * 0.8 / n) ** 0.5  # split by sentence hash: about test_fraction
    assert continuation_examples(0.2) == examples  # deterministic


# ---------------------------------------------------------------------------------------- fine-tuning a writer
@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
def test_fine_tuning_a_writer_lowers_its_target_loss_and_repeats_from_its_seed(family):
    from selfsup.evaluation.generation import finetune_writer, rows
    from selfsup.evaluation.probe import Finetune

    sources = [[3 + i, 4 + i, 5 + i] for i in range(8)]
    targets = [[20 + i, 21 + i] if i % 2 else [20 + i] for i in range(8)]  # lengths differ: padding in the batches
    train = write(family, sources, targets, EOS, BOS, PAD)

    def per_token(model) -> float:
        with torch.no_grad():
            summed, count = target_loss(model, train)
        return float(summed.sum() / count.sum())

    settings = Finetune(steps=40, lr=3e-3, batch_size=4)
    tuned = model_of(family)
    before = per_token(tuned)
    finetune_writer(tuned, train, settings, seed=7)
    assert per_token(tuned) < 0.5 * before  # it learned the targets it was shown
    again = model_of(family)
    finetune_writer(again, train, settings, seed=7)
    assert all(torch.equal(a, b) for a, b in zip(tuned.state_dict().values(), again.state_dict().values()))
    other = model_of(family)
    finetune_writer(other, train, settings, seed=8)
    assert not all(torch.equal(a, b) for a, b in zip(tuned.state_dict().values(), other.state_dict().values()))
    # a batch is cut to its longest example: the loss of rows cut equals the loss of the same rows uncut
    pick = torch.tensor([0, 2])
    with torch.no_grad():
        cut = target_loss(tuned, rows(train, pick))[0]
        whole = target_loss(tuned, uncut(train, pick))[0]
    torch.testing.assert_close(cut, whole)


def uncut(written, pick):
    """The rows `pick` of `written`, their padding kept."""
    from selfsup.evaluation.generation import Written

    take = lambda t: None if t is None else t[pick]  # noqa: E731
    return Written(take(written.inputs), take(written.labels), take(written.encoder_inputs), take(written.encoder_mask))
