"""Byte-level BPE tokenizer: training (special tokens first), loading, the Vocab of a tokenizer, and the
one-shot encoding the streaming token cache (selfsup.data.cache) is checked against."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from selfsup.data.sources import DataError
from selfsup.data.vocab import FIM_SPECIALS, WORD_START_MARKER, Vocab, special_tokens

N_BYTES = 256  # the byte-level alphabet every byte-level BPE vocabulary holds
_ENCODE_CHUNK = 4096  # documents per encode_batch call (bounds the memory held by Encoding objects)


def min_vocab_size(n_sentinels: int) -> int:
    return len(special_tokens(n_sentinels)) + N_BYTES


def check_vocab_size(vocab_size: int, n_sentinels: int) -> None:
    minimum = min_vocab_size(n_sentinels)
    if vocab_size < minimum:
        raise DataError(
            f"data.vocab_size={vocab_size} is too small: byte-level BPE needs at least {minimum} "
            f"({minimum - N_BYTES} special tokens + {N_BYTES} bytes): raise data.vocab_size or lower data.n_sentinels"
        )


def _finish(tokenizer: Tokenizer) -> Tokenizer:
    # Literal "<pad>", "</s>", ... in the text are text, not special tokens.
    tokenizer.encode_special_tokens = True
    return tokenizer


def train_tokenizer(documents: Iterable[str], vocab_size: int, n_sentinels: int, fim: bool = True) -> Tokenizer:
    """Train byte-level BPE on `documents`; the special tokens get ids 0..n_special-1 in order.

    The vocabulary can come out smaller than `vocab_size` when the text holds fewer merges seen
    at least twice. Decoding drops the one space the pre-tokenizer puts before a text, so
    decode(encode(x)) == x for text that does not begin with a space.
    """
    check_vocab_size(vocab_size, n_sentinels)
    specials = special_tokens(n_sentinels, fim)  # fim False: the layout before the fill-in-the-middle tokens
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tokenizer.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tokenizer.train_from_iterator(
        documents, trainer, length=len(documents) if isinstance(documents, Sequence) else None
    )
    ids = [tokenizer.token_to_id(token) for token in specials]
    assert ids == list(range(len(specials))), f"special tokens got ids {ids[:8]}…, expected 0..{len(specials) - 1}"
    return _finish(tokenizer)


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    return _finish(Tokenizer.from_file(str(path)))


def load_tokenizer_json(text: str) -> Tokenizer:
    return _finish(Tokenizer.from_str(text))


def vocab_from_tokenizer(tokenizer: Tokenizer, n_sentinels: int) -> Vocab:
    """The Vocab of a tokenizer: its size, whether it holds the fill-in-the-middle tokens (fim), word_start (tokens beginning with 'Ġ' (byte-level BPE) or '▁'
    (SentencePiece), WordPiece tokens not beginning with its '##', and specials) and full_stop (the token '.', alone
    or after one of those markers)."""
    size = tokenizer.get_vocab_size()
    # the fill-in-the-middle tokens right after the sentinels, or a tokenizer made before they existed
    fim = [tokenizer.token_to_id(t) for t in FIM_SPECIALS] == [
        len(special_tokens(n_sentinels, fim=False)) + i for i in range(3)
    ]
    n_special = len(special_tokens(n_sentinels, fim))
    word_start = torch.zeros(size, dtype=torch.bool)
    full_stop = torch.zeros(size, dtype=torch.bool)
    model = json.loads(tokenizer.to_str()).get("model") or {}
    continuing = model.get("continuing_subword_prefix") if model.get("type") == "WordPiece" else None
    for token, i in tokenizer.get_vocab().items():
        if i < size:
            word_start[i] = (
                not token.startswith(continuing) if continuing else token.startswith((WORD_START_MARKER, "\u2581"))
            )
            full_stop[i] = token in (".", WORD_START_MARKER + ".", "\u2581.")
    word_start[:n_special] = True
    full_stop[:n_special] = False
    return Vocab(size=size, n_sentinels=n_sentinels, word_start=word_start, full_stop=full_stop, fim=fim)


def encode_documents(tokenizer: Tokenizer, documents: Sequence[str], eos_id: int) -> np.ndarray:
    """All documents' ids, each followed by eos, in one flat array (uint16 when the ids fit)."""
    dtype = np.uint16 if tokenizer.get_vocab_size() <= 2**16 else np.uint32
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)  # no offsets: faster
    parts = []
    for start in range(0, len(documents), _ENCODE_CHUNK):
        for encoding in encode(list(documents[start : start + _ENCODE_CHUNK]), add_special_tokens=False):
            parts.append(np.asarray(encoding.ids, dtype=dtype))
            parts.append(np.asarray([eos_id], dtype=dtype))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
