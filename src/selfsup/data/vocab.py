"""The vocabulary layout every layer agrees on: special tokens first, ordinary tokens after.

Ids, in order: <pad> <s> </s> <mask> <mode_r> <mode_x> <mode_s> <extra_id_0> … <extra_id_{n-1}>
<fim_prefix> <fim_middle> <fim_suffix>, then the ordinary (byte-level BPE) tokens. A tokenizer made before the
fill-in-the-middle tokens existed (a run dir of an earlier version) has none: its Vocab says so (`fim` False). Keeping the specials in one contiguous block at the
start makes "is this token special?" a single comparison (`id < vocab.first_ordinary`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BASE_SPECIALS = ("<pad>", "<s>", "</s>", "<mask>", "<mode_r>", "<mode_x>", "<mode_s>")
FIM_SPECIALS = ("<fim_prefix>", "<fim_middle>", "<fim_suffix>")  # fill-in-the-middle's sentinels (StarCoder's names)
WORD_START_MARKER = "\u0120"  # 'Ġ': byte-level BPE's marker for a token that begins with a space


def special_tokens(n_sentinels: int, fim: bool = True) -> list[str]:
    """All special token strings, in id order (`fim` False: the layout without fill-in-the-middle's tokens)."""
    return list(BASE_SPECIALS) + [f"<extra_id_{i}>" for i in range(n_sentinels)] + list(FIM_SPECIALS if fim else ())


@dataclass(frozen=True)
class Vocab:
    """What objectives need to know about the token ids; nothing about how text became ids.

    size: number of real token ids (ids in [0, size)); the model may pad its embedding beyond this.
    word_start: optional bool tensor [size], True where a token begins a new word (for whole-word
    masking); special tokens count as word starts.
    full_stop: optional bool tensor [size], True on the full stop token ('.', with or without the word-start
    marker): where BART's sentence permutation splits sentences; None: no token is one.
    fim: the fill-in-the-middle tokens follow the sentinels (fim_ids: <fim_prefix> <fim_middle> <fim_suffix>).
    """

    size: int
    n_sentinels: int = 100
    word_start: torch.Tensor | None = None
    full_stop: torch.Tensor | None = None
    fim: bool = True

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
    def sentinel_end(self) -> int:
        """One past the last sentinel <extra_id_{n-1}>."""
        return self.sentinel_start + self.n_sentinels

    @property
    def fim_ids(self) -> tuple[int, int, int]:
        """<fim_prefix>, <fim_middle>, <fim_suffix>'s ids (ValueError where the vocabulary has none)."""
        if not self.fim:
            raise ValueError("this vocabulary has no fill-in-the-middle tokens")
        return (self.sentinel_end, self.sentinel_end + 1, self.sentinel_end + 2)

    @property
    def first_ordinary(self) -> int:
        return self.sentinel_end + (len(FIM_SPECIALS) if self.fim else 0)

    def sentinel(self, i: int) -> int:
        return self.sentinel_start + i
