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
    _padded,
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


def model_of(family: str, **shape) -> torch.nn.Module:
    """An untrained model whose output head is untied from its embeddings (a tied one, untrained, mostly writes
    back the token it reads), so that greedy decoding writes varied tokens."""
    torch.manual_seed(0)
    model = build_model(family, 40, 24, d_model=32, n_layers=2, n_heads=4, **shape).eval()
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


SHAPES = {
    "learned": {},
    "relative": dict(positions="relative"),
    "t5": dict(
        positions="relative",
        norm="rmsnorm",
        bias=False,
        scale_attention=False,
        activation="gated-gelu",
        relative_buckets=8,
        relative_max_distance=12,
    ),
}
UNWRITTEN = 50  # a vocabulary padding id (vocabulary 40, padded to 64): its logit is -inf, so no row ever ends


def recomputed(model, sources, eos_id, max_new_tokens):
    """Greedy decoding without a cache, as a reference: the whole forward over each growing stream at every token
    (the encoder-decoder's encoder included), the decoder's sources of one length in one batch."""

    def run(prompt, encoder=None, mask=None):
        ids, out = prompt, [[] for _ in prompt]
        done = torch.zeros(len(prompt), dtype=torch.bool)
        for _ in range(max(0, min(max_new_tokens, model.max_len - prompt.shape[1] + 1))):
            if encoder is None:
                hidden = model(decoder_inputs=ids)
            else:
                hidden = model(encoder_inputs=encoder, encoder_mask=mask, decoder_inputs=ids)
            token = model.head(hidden[:, -1]).argmax(-1)
            for i in torch.nonzero(~done).flatten().tolist():
                if int(token[i]) == eos_id:
                    done[i] = True
                else:
                    out[i].append(int(token[i]))
            if bool(done.all()):
                break
            ids = torch.cat([ids, token[:, None]], dim=1)
        return out

    with torch.no_grad():
        if model.arch == "decoder":
            written = [[] for _ in sources]
            groups: dict[int, list[int]] = {}
            for i, source in enumerate(sources):
                groups.setdefault(len(source), []).append(i)
            for rows in groups.values():
                for i, tokens in zip(rows, run(torch.tensor([[*sources[i], eos_id] for i in rows]))):
                    written[i] = tokens
            return written
        encoder = _padded([[*s, eos_id] for s in sources], PAD)
        mask = _padded([[1] * (len(s) + 1) for s in sources], 0).bool()
        return run(torch.full((len(sources), 1), BOS), encoder, mask)


def sources_of(lengths, seed=3):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 40, (n,), generator=generator).tolist() for n in lengths]


# sources of several lengths (two pairs of one length), four whose streams reach the decoder's max_len 24 within
# the 8 new tokens, one (23 tokens) whose stream `source eos` fills it, and for the decoder one that overflows it
LENGTHS = [1, 4, 4, 9, 15, 20, 21, 22, 23, 2, 9]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
@pytest.mark.parametrize("eos", [EOS, 39, UNWRITTEN])
def test_cached_greedy_decoding_writes_the_tokens_full_recomputation_writes(family, shape, eos):
    """All sources in one batch (the decoder's right-padded), a token per step through the key/value cache: token
    for token what recomputing every forward from scratch writes, each row stopped at its eos or at max_len."""
    model = model_of(family, **SHAPES[shape])
    sources = sources_of(LENGTHS + ([24] if family == "decoder" else []))
    written = greedy(model, sources, eos, BOS, PAD, max_new_tokens=8)
    assert written == recomputed(model, sources, eos, 8)
    limits = [min(8, 24 - len(s)) if family == "decoder" else 8 for s in sources]
    assert all(len(tokens) <= limit and eos not in tokens for tokens, limit in zip(written, limits))
    if eos == UNWRITTEN:  # no row ends: each writes up to its limit (the decoder's: its stream reaches max_len)
        assert [len(tokens) for tokens in written] == limits


def test_cached_greedy_decoding_stops_each_row_at_its_own_eos():
    model = model_of("decoder")
    sources = sources_of(LENGTHS)
    written = greedy(model, sources, EOS, BOS, PAD, max_new_tokens=8)
    assert written == recomputed(model, sources, EOS, 8)
    stopped = [len(tokens) < min(8, 24 - len(s)) for s, tokens in zip(sources, written)]
    assert any(stopped) and not all(stopped)  # some rows wrote their eos while others went on


@pytest.mark.parametrize("family", ["decoder", "encoder_decoder"])
def test_greedy_decoding_writes_up_to_max_len_and_no_source_is_too_long_for_the_decoder(family):
    model = model_of(family)  # max_len 24
    sources = sources_of([3, 23] + ([24, 30] if family == "decoder" else []))
    written = greedy(model, sources, UNWRITTEN, BOS, PAD, max_new_tokens=40)
    # the decoder's stream `source eos new` (at most 24 tokens; one of 25 or more writes nothing), the
    # encoder-decoder's decoder input `bos new` (at most 24: 23 new, and the 24th read from the full input)
    assert [len(tokens) for tokens in written] == ([21, 1, 0, 0] if family == "decoder" else [24, 24])
    assert written == recomputed(model, sources, UNWRITTEN, 40)
    assert greedy(model, [], EOS, BOS, PAD, 5) == [] and greedy(model, sources, EOS, BOS, PAD, 0) == [[]] * len(sources)


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
