"""Causal LM (GPT): every token is predicted from its left context."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.objectives.base import IGNORE, Objective, ObjectiveBatch


@dataclass
class CausalLMConfig:
    """objective=clm (conf/objective/clm.yaml)."""

    _target_: str = "selfsup.objectives.CausalLM"
    name: str = "clm"


class CausalLM(Objective):
    """Position t of the decoder input predicts token t+1 from tokens <= t.

    A window of seq_len + 1 raw tokens gives seq_len inputs and seq_len scored targets; a
    one-token sequence has no scored position; padding is never a target.
    """

    name = "clm"
    architectures = (DECODER,)
    refusals = {
        ENCODER: "bidirectional attention lets a token see its own answer",
        ENCODER_DECODER: "CLM predicts every next token from one causal stack; use architecture=decoder",
    }

    @property
    def raw_length(self) -> int:
        return self.seq_len + 1

    def __call__(self, tokens: torch.Tensor, generator: torch.Generator) -> ObjectiveBatch:
        targets = tokens[:, 1:]
        targets = targets.masked_fill(targets == self.vocab.pad_id, IGNORE)
        return ObjectiveBatch(targets=targets, n_inputs=self.count_inputs(tokens), decoder_inputs=tokens[:, :-1])
