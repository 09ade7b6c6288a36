"""Prefix LM: a random prefix is visible in both directions; the rest is predicted left to right.

The split point is uniform in [1, L-1] per sequence (L = raw window). Only the part after the
prefix is scored. For a decoder the prefix is an attention mask (`prefix_length`); for an
encoder-decoder the prefix is the encoder input and the decoder writes the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.objectives.base import IGNORE, Objective, ObjectiveBatch


@dataclass
class PrefixLMConfig:
    """objective=prefix_lm (conf/objective/prefix_lm.yaml)."""

    _target_: str = "selfsup.objectives.PrefixLM"
    name: str = "prefix_lm"


class PrefixLM(Objective):
    name = "prefix_lm"
    architectures = (DECODER, ENCODER_DECODER)
    refusals = {ENCODER: "bidirectional attention over the predicted part lets a token see its own answer"}

    @property
    def raw_length(self) -> int:
        # a decoder reads seq_len inputs from seq_len + 1 tokens (like CLM); an encoder-decoder
        # reads the prefix (padded to seq_len) in its encoder
        return self.seq_len + 1 if self.architecture == DECODER else self.seq_len

    def split_points(self, batch: int, length: int, generator: torch.Generator, device) -> torch.Tensor:
        return torch.randint(1, length, (batch,), generator=generator, device=device)

    def __call__(self, tokens: torch.Tensor, generator: torch.Generator) -> ObjectiveBatch:
        B, L = tokens.shape
        split = self.split_points(B, L, generator, tokens.device)
        # a row padded on the right: its prefix ends before the padding (a full row keeps its draw)
        real = (tokens != self.vocab.pad_id).sum(dim=1)
        split = torch.minimum(split, (real - 1).clamp(min=1))
        pos = torch.arange(L, device=tokens.device)
        if self.architecture == DECODER:
            # target j is token j+1; it is scored when token j+1 lies after the prefix
            targets = tokens[:, 1:].masked_fill(pos[None, 1:] < split[:, None], IGNORE)
            targets = targets.masked_fill(tokens[:, 1:] == self.vocab.pad_id, IGNORE)
            return ObjectiveBatch(
                targets=targets, n_inputs=self.count_inputs(tokens), decoder_inputs=tokens[:, :-1], prefix_length=split
            )
        # encoder-decoder: encoder gets tokens[:split] (padded), decoder writes tokens[split:]
        in_prefix = pos[None, :] < split[:, None]
        encoder_inputs = tokens.masked_fill(~in_prefix, self.vocab.pad_id)
        idx = split[:, None] + pos[None, : L - 1]
        rest = tokens.gather(1, idx.clamp(max=L - 1))
        valid = (idx < L) & (rest != self.vocab.pad_id)
        targets = rest.masked_fill(~valid, IGNORE)
        decoder_inputs = torch.cat(
            [
                torch.full_like(rest[:, :1], self.vocab.bos_id),
                rest[:, :-1].masked_fill(~valid[:, :-1], self.vocab.pad_id),
            ],
            dim=1,
        )
        return ObjectiveBatch(
            targets=targets,
            n_inputs=self.count_inputs(tokens),
            encoder_inputs=encoder_inputs,
            decoder_inputs=decoder_inputs,
            encoder_mask=in_prefix & (tokens != self.vocab.pad_id),
        )
