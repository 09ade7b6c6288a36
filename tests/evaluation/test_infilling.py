"""The infilling job: the examples are cut the same way for every run, each decoder reads them in its own layout
(FIM's sentinels, or the prefix alone) over the same middle tokens, the loss is the teacher-forced -log p of the
middle by hand, greedy decoding writes at most the middle's length, and bad settings are refused in one line."""

import json

import pytest
import torch

from selfsup.data.tokenizer import train_tokenizer, vocab_from_tokenizer
from selfsup.evaluation import EvalError, Infilling
from selfsup.evaluation.generation import normalize_answer
from selfsup.evaluation.infilling import cut
from selfsup.models import build_model

TEXT = [
    "The cat sat on the mat and the dog lay by the door of the house all day long.",
    "Return the list of files found in the directory given by path, in arbitrary order.",
    "A short line of words.",
    "Two words",
    "the the the the",  # every middle is an article: nothing to score
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXT * 20, 400, 10)


def job(tmp_path, tokenizer, model_length=32, infills=False, texts=TEXT, **settings):
    path = tmp_path / "infilling.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    j = Infilling(source="text_files", paths=[str(path)], **settings)
    j.check()
    j.setup(vocab_from_tokenizer(tokenizer, 10), tokenizer, model_length, infills)
    return j


def test_examples_are_cut_at_words_the_same_for_every_run_with_a_prefix_a_middle_and_a_suffix():
    documents = [f"w{i} " * (3 + i % 20) + "end" for i in range(200)] + TEXT
    examples = cut(documents, 500, 12, 3)
    assert examples == cut(documents, 500, 12, 3)  # a fixed seed
    for (prefix, middle, suffix), text in zip(examples, [d for d in documents if len(d.split()) >= 3]):
        assert f"{prefix} {middle} {suffix}".split() == text.split()[:12]
        assert prefix and suffix and 1 <= len(middle.split()) <= 3
    assert {len(m.split()) for _, m, _ in examples} == {1, 2, 3}
    assert all(normalize_answer(m) for _, m, _ in cut(TEXT, 10, 24, 3))  # "the the the the" gave none
    assert len(cut(documents, 7, 12, 3)) == 7


def test_fim_and_prefix_layouts_read_the_same_middle_tokens(tmp_path, tokenizer):
    fim, clm = job(tmp_path, tokenizer, infills=True), job(tmp_path, tokenizer)
    vocab = fim.vocab
    pre, mid, suf = vocab.fim_ids
    spm = job(tmp_path, tokenizer, infills=True, fim_layout="spm")
    assert (fim.layout, clm.layout, spm.layout) == ("psm", "prefix", "spm")
    assert fim.fingerprint == clm.fingerprint == spm.fingerprint
    for (prefix, middle, suffix), f, c, sp, m in zip(fim.examples, fim.rows, clm.rows, spm.rows, fim.middles):
        ids = [tokenizer.encode(t, add_special_tokens=False).ids for t in (prefix, middle, suffix)]
        assert m == ids[1] and f[-len(m) :] == c[-len(m) :] == m
        assert f == [pre, *ids[0], suf, *ids[2], mid, *ids[1]] or len(f) == 32 + 1  # cut to fit: the longer side
        assert c == [vocab.eos_id, *f[1 : f.index(suf)], *m]  # the prefix alone, the same tokens
        assert sp == [pre, suf, *f[f.index(suf) + 1 : f.index(mid)], mid, *f[1 : f.index(suf)], *m]  # SPM
        assert len(f) <= 33 and f[0] == pre and f.index(mid) == len(f) - len(m) - 1
    short = job(tmp_path, tokenizer, model_length=12, infills=True)
    assert all(len(r) <= 13 for r in short.rows) and short.middles == [
        m for m in fim.middles if len(m) <= 13 - 3 - 2
    ]  # a middle that leaves no room for a prefix and a suffix token is left out, the others kept whole


def test_the_loss_is_the_middles_teacher_forced_log_probability_and_greedy_writes_at_most_its_length(
    tmp_path, tokenizer
):
    j = job(tmp_path, tokenizer, infills=True)
    torch.manual_seed(0)
    model = build_model("decoder", tokenizer.get_vocab_size(), 32, d_model=16, n_layers=1, n_heads=2).eval()
    found, predictions = j.scores(model)
    for k, (row, middle) in enumerate(zip(j.rows, j.middles)):
        with torch.no_grad():
            logits = model.head(model(decoder_inputs=torch.tensor([row[:-1]])))[0].float()
        at = torch.arange(len(row) - 1 - len(middle), len(row) - 1)
        nll = -logits.log_softmax(-1)[at, torch.tensor(middle)].double().mean().item()
        assert found["loss"][k].item() == pytest.approx(nll, rel=1e-6)
        greedy, ids = [], list(row[: len(row) - len(middle)])
        for _ in middle:  # argmax, one token at a time, the model's own tokens fed back
            with torch.no_grad():
                token = int(model.head(model(decoder_inputs=torch.tensor([ids])))[0, -1].argmax())
            if token == j.vocab.eos_id:
                break
            greedy.append(token)
            ids.append(token)
        assert predictions[k] == tokenizer.decode(greedy, skip_special_tokens=True)
        assert found["exact_match"][k] == float(normalize_answer(predictions[k]) == normalize_answer(j.references[k]))
    assert model.training is False


def test_bad_settings_are_refused_in_one_line(tmp_path, tokenizer):
    with pytest.raises(EvalError, match=r"eval.infilling.max_words=2 leaves no room"):
        job(tmp_path, tokenizer, max_words=2)
    with pytest.raises(EvalError, match=r"eval.infilling.middle_words=0"):
        job(tmp_path, tokenizer, middle_words=0)
    with pytest.raises(
        EvalError, match=r"eval.infilling \(text_files\) holds no text to cut into a prefix, a middle and a suffix"
    ):
        job(tmp_path, tokenizer, texts=["Two words", "the the the"])
    with pytest.raises(EvalError, match=r"eval.infilling.fim_layout=pms is unknown: use one of psm, spm"):
        job(tmp_path, tokenizer, fim_layout="pms")
    with pytest.raises(EvalError, match=r"eval.infilling.source=nowhere is unknown"):
        Infilling(source="nowhere").check()
