"""The held-out text in bits per UTF-8 byte: the hand computation on a short text, multi-byte characters, the
pieces a long document is cut into, its interval over documents, and bad settings refused in one line."""

import math

import numpy as np
import pytest
import torch

from selfsup.data.tokenizer import train_tokenizer
from selfsup.data.vocab import Vocab
from selfsup.evaluation import EvalError
from selfsup.evaluation.heldout import HeldoutText
from selfsup.evaluation.stats import exam_difference
from selfsup.models import build_model

TEXT = [
    "The cat sat on the mat, and the dog lay by the door. " * 3,
    "Café au lait costs 3 € — naïve résumé. ",
    "A short line.",
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXT * 20 + ["words of every kind: " + " ".join(TEXT)], 400, 10)


def model_of(architecture, tokenizer, seed=0):
    torch.manual_seed(seed)
    return build_model(architecture, tokenizer.get_vocab_size(), 32, d_model=16, n_layers=1, n_heads=2).eval()


def heldout(tmp_path, tokenizer, architecture="decoder", texts=TEXT, model_length=32, **settings):
    path = tmp_path / "heldout.jsonl"
    path.write_text("".join(__import__("json").dumps({"text": t}) + "\n" for t in texts))
    h = HeldoutText(source="text_files", paths=[str(path)], **settings)
    h.check()
    h.setup(architecture, Vocab(tokenizer.get_vocab_size(), n_sentinels=10), tokenizer, model_length)
    return h


def test_bits_per_byte_is_the_summed_log2_probability_over_the_utf8_bytes_by_hand(tmp_path, tokenizer):
    h = heldout(tmp_path, tokenizer, texts=[TEXT[1]])
    model = model_of("decoder", tokenizer)
    found = h(model)
    ids = tokenizer.encode(TEXT[1], add_special_tokens=False).ids
    assert len(ids) <= 30  # one piece: </s> t0 ... t(n-2) predicts t0 ... t(n-1)
    with torch.no_grad():
        logits = model.head(model(decoder_inputs=torch.tensor([[2, *ids[:-1]]])))[0].float()
    nats = -logits.log_softmax(-1)[torch.arange(len(ids)), torch.tensor(ids)].double().sum().item()
    n_bytes = len(TEXT[1].encode("utf-8"))
    assert n_bytes > len(TEXT[1])  # é, €, — and ï take more than one byte each: bytes, not characters
    assert found["eval/heldout/bits_per_byte"] == pytest.approx(nats / math.log(2) / n_bytes, rel=1e-9)


@pytest.mark.parametrize("architecture", ["decoder", "encoder", "encoder_decoder"])
def test_a_long_document_is_cut_into_pieces_the_model_holds_and_the_interval_holds_the_score(
    tmp_path, tokenizer, architecture
):
    h = heldout(tmp_path, tokenizer, architecture, model_length=16)
    assert max(len(p) for p in h.pieces) <= 14 and len(h.pieces) > len(h.documents)
    found = h(model_of(architecture, tokenizer))
    low, value, high = (found[f"eval/heldout/bits_per_byte{e}"] for e in ("_low", "", "_high"))
    assert low <= value <= high and found["eval/heldout/bits_per_byte_se"] > 0
    assert set(h.last) == {"nll", "count", "member"} and h.last["count"].sum() == sum(len(t.encode()) for t in TEXT)


def test_identical_models_differ_by_exactly_zero(tmp_path, tokenizer):
    h = heldout(tmp_path, tokenizer)
    h(model_of("decoder", tokenizer, 0))
    a = h.last
    h(model_of("decoder", tokenizer, 0))
    d = exam_difference(a["nll"], h.last["nll"], a["count"], a["member"])
    assert (d.value, d.low, d.high) == (0.0, 0.0, 0.0)


def test_max_bytes_cuts_the_text_at_a_character_boundary(tmp_path, tokenizer):
    h = heldout(tmp_path, tokenizer, max_bytes=len(TEXT[0].encode()) + 4)  # 4 bytes into "Café": é is 2 of 5
    assert h.documents == [TEXT[0], "Caf"]


def test_the_builtin_text_is_never_in_the_builtin_corpus():
    from selfsup.data.builtin import builtin_documents

    h = HeldoutText(max_bytes=4096)
    h.check()
    corpus = set(builtin_documents())
    assert h.documents and not any(d in corpus for d in h.documents)
    assert sum(len(d.encode()) for d in h.documents) <= 4096


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"source": "web"}, "eval.heldout.source=web is unknown: use one of builtin, text_files, hf_dataset"),
        ({"source": "text_files"}, "eval.heldout.source=text_files needs eval.heldout.paths"),
        ({"source": "hf_dataset"}, "eval.heldout.source=hf_dataset needs eval.heldout.hf_name"),
        ({"max_bytes": 0}, "eval.heldout.max_bytes"),
        (
            {"source": "text_files", "paths": ["EMPTY"]},
            "empty.txt is empty: add text to it or remove it from eval.heldout.paths",
        ),
    ],
)
def test_bad_settings_are_refused_in_one_line(tmp_path, settings, message):
    (tmp_path / "empty.txt").write_text("  \n")
    settings = {k: [str(tmp_path / "empty.txt")] if v == ["EMPTY"] else v for k, v in settings.items()}
    with pytest.raises(EvalError, match=message.replace("(", r"\(")) as err:
        HeldoutText(**settings).check()
    assert "\n" not in str(err.value)


def test_the_unigram_reference_is_the_training_counts_on_the_same_tokens(tmp_path, tokenizer):
    h = HeldoutText(source="text_files", paths=[])
    h.documents = [TEXT[2]]
    uniform = np.full(tokenizer.get_vocab_size(), -math.log(tokenizer.get_vocab_size()))
    h.setup("decoder", Vocab(tokenizer.get_vocab_size(), n_sentinels=10), tokenizer, 32, uniform)
    found = h(model_of("decoder", tokenizer))
    n = len(tokenizer.encode(TEXT[2], add_special_tokens=False).ids)
    expected = n * math.log(tokenizer.get_vocab_size()) / math.log(2) / len(TEXT[2].encode())
    assert found["eval/heldout/unigram_bits_per_byte"] == pytest.approx(expected, rel=1e-12)
    assert found["eval/heldout/unigram_gap"] == pytest.approx(found["eval/heldout/bits_per_byte"] - expected, rel=1e-9)


def test_a_text_from_a_local_hf_dataset(tmp_path):
    pytest.importorskip("datasets")
    path = tmp_path / "validation.jsonl"
    path.write_text("".join(__import__("json").dumps({"body": t}) + "\n" for t in TEXT))
    h = HeldoutText(source="hf_dataset", hf_name="json", data_files={"validation": str(path)}, text_field="body")
    h.check()
    assert h.documents == TEXT
    wrong = HeldoutText(source="hf_dataset", hf_name="json", data_files={"validation": str(path)})
    with pytest.raises(EvalError, match="a row has no text field 'text': set eval.heldout.text_field"):
        wrong.check()
