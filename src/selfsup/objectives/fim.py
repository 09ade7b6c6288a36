"""Fill-in-the-middle (Bavarian et al. 2022, "Efficient Training of Language Models to Fill in the Middle").

With probability `fim_rate` a training window is cut at two points into prefix / middle / suffix and
rearranged so that a left-to-right decoder learns to write the middle after reading both sides:

    PSM  <fim_prefix> prefix <fim_suffix> suffix <fim_middle> middle
    SPM  <fim_prefix> <fim_suffix> suffix <fim_middle> prefix middle     (with probability spm_rate)

SPM is the variant of the paper's appendix D that Hugging Face's run_fim.py and StarCoder train: the prefix
and the middle are one contiguous text after <fim_middle>. The other windows stay as they are (plain CLM). Every
row is trained with the ordinary next-token loss over its whole sequence, sentinels included (padding is never a
target): the model's input is the sequence less its last token, its targets the sequence less its first.

Choices (docs/objectives.md): the cut is at the token level (as run_fim.py; the paper cuts characters), two
points drawn uniformly over the n + 1 gaps of the window and sorted (a part may be empty); FIM is applied per
context (each training window as one unit, which may hold the end of one document and the start of another),
not per document before packing. Windows keep their shape: a rearranged window is its first raw - 3 tokens (the
three sentinels take the room of the last three), so every batch is [B, seq_len] like CLM's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.objectives.base import IGNORE, Objective, ObjectiveBatch, ObjectiveError, check_probability


@dataclass
class FimConfig:
    """objective=fim (conf/objective/fim.yaml): the defaults of run_fim.py and the paper's joint PSM/SPM training."""

    _target_: str = "selfsup.objectives.FillInTheMiddle"
    name: str = "fim"
    fim_rate: float = 0.5  # the share of windows rearranged (the rest are plain CLM windows)
    spm_rate: float = 0.5  # of those, the share in SPM order (the rest PSM)


N_SENTINELS = 3  # <fim_prefix> <fim_middle> <fim_suffix>


class FillInTheMiddle(Objective):
    name = "fim"
    infills = True
    architectures = (DECODER,)
    refusals = {
        ENCODER: "bidirectional attention lets a token see its own answer",
        ENCODER_DECODER: "FIM trains one causal stack on the rearranged text; use architecture=decoder",
    }

    def __init__(self, vocab, seq_len: int, architecture: str | None = None, name: str | None = None,
                 fim_rate: float = 0.5, spm_rate: float = 0.5):  # fmt: skip
        super().__init__(vocab, seq_len, architecture, name)
        check_probability("objective.fim_rate", fim_rate)
        check_probability("objective.spm_rate", spm_rate)
        if not vocab.fim:
            raise ObjectiveError(
                "objective=fim needs the tokens <fim_prefix> <fim_middle> <fim_suffix>, and this tokenizer was made "
                "without them (a run of an earlier version): train a new tokenizer (delete data.cache_dir's entry)"
            )
        if seq_len + 1 <= N_SENTINELS:
            raise ObjectiveError(
                f"data.seq_len={seq_len} leaves no text beside FIM's {N_SENTINELS} sentinels: raise data.seq_len"
            )
        self.fim_rate, self.spm_rate = fim_rate, spm_rate

    @property
    def raw_length(self) -> int:
        return self.seq_len + 1

    def rearrange(self, tokens: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """The windows [B, raw], each rearranged with probability fim_rate (in SPM order with probability spm_rate,
        cut at two points drawn uniformly over the n + 1 gaps of its n = min(real, raw - 3) tokens), and the number
        of text tokens each row reads: n where rearranged, else its real (non-pad) tokens."""
        B, R = tokens.shape
        draws = torch.rand(B, 4, generator=generator, device=tokens.device)  # fim?, spm?, two cut points
        real = (tokens != self.vocab.pad_id).sum(1)
        n = real.clamp(max=R - N_SENTINELS)
        fim = (draws[:, 0] < self.fim_rate) & (n > 0)
        cuts = (draws[:, 2:] * (n[:, None] + 1)).long().clamp(max=n[:, None])
        rows = self.layout(tokens, n, cuts.min(1).values, cuts.max(1).values, draws[:, 1] < self.spm_rate)
        return torch.where(fim[:, None], rows, tokens), torch.where(fim, n, real)

    def layout(self, tokens: torch.Tensor, n: torch.Tensor, i: torch.Tensor, j: torch.Tensor, spm: torch.Tensor):
        """Each row's first n tokens d as prefix d[:i], middle d[i:j], suffix d[j:n] in PSM order (SPM where `spm`),
        padded to the window's length."""
        R = tokens.shape[1]
        pre, mid, suf = self.vocab.fim_ids
        p = torch.arange(R, device=tokens.device)[None, :]
        i, j, n = i[:, None], j[:, None], n[:, None]
        s = n - j  # the suffix's length
        # PSM: pre | d[0:i] | suf | d[j:n] | mid | d[i:j]  (the source index of each text position, or a sentinel)
        psm_src = torch.where(p <= i, p - 1, torch.where(p <= i + 1 + s, j + p - (i + 2), i + p - (i + 3 + s)))
        psm_tok = torch.where(p == 0, pre, torch.where(p == i + 1, suf, torch.where(p == i + 2 + s, mid, -1)))
        # SPM: pre | suf | d[j:n] | mid | d[0:j]  (prefix and middle one text)
        spm_src = torch.where(p < 2 + s, j + p - 2, p - (s + 3))
        spm_tok = torch.where(p == 0, pre, torch.where(p == 1, suf, torch.where(p == 2 + s, mid, -1)))
        src = torch.where(spm[:, None], spm_src, psm_src)
        tok = torch.where(spm[:, None], spm_tok, psm_tok)
        rows = torch.where(tok >= 0, tok, tokens.gather(1, src.clamp(0, R - 1)))
        return rows.masked_fill(p >= n + N_SENTINELS, self.vocab.pad_id)  # a short row's padding stays padding

    def __call__(self, tokens: torch.Tensor, generator: torch.Generator) -> ObjectiveBatch:
        rows, read = self.rearrange(tokens, generator)
        targets = rows[:, 1:].masked_fill(rows[:, 1:] == self.vocab.pad_id, IGNORE)
        return ObjectiveBatch(targets=targets, n_inputs=read.sum(), decoder_inputs=rows[:, :-1])
