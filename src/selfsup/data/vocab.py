"""The vocabulary layout every layer agrees on: special tokens first, ordinary tokens after.

Ids, in order: <pad> <s> </s> <mask> <mode_r> <mode_x> <mode_s> <extra_id_0> … <extra_id_{n-1}>,
then the ordinary (byte-level BPE) tokens. Keeping the specials in one contiguous block at the
start makes "is this token special?" a single comparison (`id < vocab.first_ordinary`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BASE_SPECIALS = ("<pad>", "<s>", "</s>", "<mask>", "<mode_r>", "<mode_x>", "<mode_s>")
WORD_START_MARKER = "\u0120"  # 'Ġ': byte-level BPE's marker for a token that begins with a space


def special_tokens(n_sentinels: int) -> list[str]:
    """All special token strings, in id order."""
    return list(BASE_SPECIALS) + [f"<extra_id_{i}>" for i in range(n_sentinels)]


@dataclass(frozen=True)
class Vocab:
    """What objectives need to know about the token ids; nothing about how text became ids.

    size: number of real token ids (ids in [0, size)); the model may pad its embedding beyond this.
    word_start: optional bool tensor [size], True where a token begins a new word (for whole-word
    masking); special tokens count as word starts.
    full_stop: optional bool tensor [size], True on the full stop token ('.', with or without the word-start
    marker): where BART's sentence permutation splits sentences; None: no token is one.
    """

    size: int
    n_sentinels: int = 100
    word_start: torch.Tensor | None = None
    full_stop: torch.Tensor | None = None

    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    mask_id: int = 3
    mode_ids: tuple[int, int, int] = (4, 5, 6)  # R, X, S denoiser families (UL2)
    sentinel_start: int = len(BASE_SPECIALS)

    def __post_init__(self) -> None:
        if self.size <= self.first_ordinary:
            raise ValueError(
                f"vocabulary size {self.size} leaves no ordinary tokens after {self.first_ordinary} "
                f"special tokens: raise the vocabulary size or lower n_sentinels"
            )

    @property
    def first_ordinary(self) -> int:
        return self.sentinel_start + self.n_sentinels

    def sentinel(self, i: int) -> int:
        return self.sentinel_start + i
