"""Byte-level BPE tokenizer and the Vocab built from it."""

from __future__ import annotations

import pytest

from selfsup.data import (
    WORD_START_MARKER,
    DataError,
    builtin_documents,
    load_tokenizer,
    min_vocab_size,
    special_tokens,
    train_tokenizer,
    vocab_from_tokenizer,
)

N_SENTINELS = 100


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(builtin_documents(max_chars=400_000), vocab_size=512, n_sentinels=N_SENTINELS)


def test_specials_come_first_in_order(tokenizer):
    specials = special_tokens(N_SENTINELS)
    assert [tokenizer.token_to_id(t) for t in specials] == list(range(len(specials)))
    assert tokenizer.id_to_token(2) == "</s>" and tokenizer.id_to_token(7) == "<extra_id_0>"
    assert tokenizer.get_vocab_size() == 512


@pytest.mark.parametrize(
    "text",
    [
        "Hello world",
        "The quick brown fox jumps over the lazy dog.",
        "def f(x):\n    return x  # tabs\tand  spaces\n\n",
        "a",
    ],
)
def test_round_trip(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert tokenizer.decode(ids) == text
    assert all(i >= min_vocab_size(N_SENTINELS) - 256 for i in ids)  # no special ids from plain text


def test_literal_special_strings_are_text(tokenizer):
    ids = tokenizer.encode("a </s> b <pad> <extra_id_0>", add_special_tokens=False).ids
    assert all(i >= len(special_tokens(N_SENTINELS)) for i in ids)
    assert tokenizer.decode(ids) == "a </s> b <pad> <extra_id_0>"


def test_round_trip_non_ascii(tokenizer):
    text = "naïve café — 東京 🙂"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False).ids) == text


def test_save_and_load_keep_behaviour(tokenizer, tmp_path):
    tokenizer.save(str(tmp_path / "t.json"))
    loaded = load_tokenizer(tmp_path / "t.json")
    text = "x </s> y"
    assert loaded.encode(text, add_special_tokens=False).ids == tokenizer.encode(text, add_special_tokens=False).ids


def test_vocab_word_start(tokenizer):
    vocab = vocab_from_tokenizer(tokenizer, N_SENTINELS)
    assert vocab.size == tokenizer.get_vocab_size()
    assert vocab.word_start.shape == (vocab.size,) and vocab.word_start.dtype.is_floating_point is False
    assert vocab.word_start[: vocab.first_ordinary].all()  # specials count as word starts
    encoding = tokenizer.encode("Hello wonderful world", add_special_tokens=False)
    for token, i in zip(encoding.tokens, encoding.ids, strict=True):
        assert bool(vocab.word_start[i]) == token.startswith(WORD_START_MARKER)
    assert vocab.word_start[tokenizer.token_to_id(WORD_START_MARKER)]
    assert not vocab.word_start[tokenizer.token_to_id("e")]
    assert 0 < int(vocab.word_start[vocab.first_ordinary :].sum()) < vocab.size - vocab.first_ordinary
    assert vocab.eos_id == tokenizer.token_to_id("</s>") and vocab.mask_id == tokenizer.token_to_id("<mask>")


def test_vocab_size_too_small():
    minimum = min_vocab_size(N_SENTINELS)
    assert minimum == 7 + N_SENTINELS + 3 + 256  # specials, sentinels, fill-in-the-middle's, bytes
    with pytest.raises(DataError, match=rf"data.vocab_size=300 is too small: .* at least {minimum}"):
        train_tokenizer(["some text", "more text"], vocab_size=300, n_sentinels=N_SENTINELS)


@pytest.mark.parametrize("damage", ["overwrite", "truncate", "delete"])
def test_a_damaged_token_cache_is_detected_and_rebuilt(tmp_path, damage, caplog):
    import numpy as np

    from selfsup.data import build_or_load_cache, builtin_documents

    docs = builtin_documents()[:40]
    settings = dict(cache_dir=tmp_path, val_fraction=0.1, vocab_size=600, n_sentinels=10)
    first = build_or_load_cache(docs, **settings)
    good = np.array(first.train_tokens)
    path = first.path / "train-00000.bin"
    data = bytearray(path.read_bytes())
    if damage == "overwrite":  # same size, other bytes: only the checksum sees it
        data[-64:] = bytes(64)
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    else:
        path.unlink()
    again = build_or_load_cache(docs, **settings)
    assert again.built and np.array_equal(np.array(again.train_tokens), good)
    assert "is damaged" in caplog.text and "rebuilding it" in caplog.text
    assert not build_or_load_cache(docs, **settings).built  # intact now: reused
