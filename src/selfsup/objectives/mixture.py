"""Mixture of denoisers (UL2): each batch samples one configured denoiser by weight.

Every denoiser reads the same raw window (seq_len tokens) and, optionally, gets a mode token of
its family (R, X or S) prepended to the encoder input, as in UL2's paradigm tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List

import torch

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.data.vocab import Vocab
from selfsup.objectives.base import Objective, ObjectiveBatch, ObjectiveError
from selfsup.objectives.prefix import PrefixLM
from selfsup.objectives.span import SpanCorruption

FAMILIES = ("R", "X", "S")


@dataclass
class Denoiser:
    family: str  # R (regular spans), X (extreme), S (sequential = prefix LM)
    mask_rate: float = 0.15
    mean_span_length: float = 3.0
    weight: float = 1.0


UL2_DENOISERS = (
    Denoiser("R", 0.15, 3),
    Denoiser("R", 0.15, 8),
    Denoiser("X", 0.5, 3),
    Denoiser("X", 0.5, 8),
    Denoiser("X", 0.15, 64),
    Denoiser("X", 0.5, 64),
    Denoiser("S"),
)


@dataclass
class MixtureConfig:
    """objective=ul2 (conf/objective/ul2.yaml): the denoisers and their mode tokens."""

    _target_: str = "selfsup.objectives.Mixture"
    name: str = "ul2"
    denoisers: List[Denoiser] = field(default_factory=list)  # each one: family R/X/S, mask_rate, span length, weight
    mode_tokens: bool = True  # prepend a mode token per denoiser family


class Mixture(Objective):
    name = "ul2"
    architectures = (ENCODER_DECODER,)
    refusals = {
        ENCODER: "UL2's span denoisers are written by a decoder; use architecture=encoder_decoder",
        DECODER: "UL2 here mixes span denoisers that need an encoder; use architecture=encoder_decoder",
    }

    def __init__(
        self,
        vocab: Vocab,
        seq_len: int,
        architecture: str | None = None,
        *,
        denoisers=UL2_DENOISERS,
        mode_tokens: bool = MixtureConfig.mode_tokens,
        name: str | None = None,
    ):
        super().__init__(vocab, seq_len, architecture, name)
        denoisers = [d if isinstance(d, Denoiser) else Denoiser(**d) for d in denoisers]
        if not denoisers:
            raise ObjectiveError("objective.denoisers is empty: configure at least one denoiser")
        self.members: list[Objective] = []
        for i, d in enumerate(denoisers):
            if d.family not in FAMILIES:
                raise ObjectiveError(f"objective.denoisers[{i}].family={d.family!r} is unknown: use R, X or S")
            if not math.isfinite(d.weight):
                raise ObjectiveError(f"objective.denoisers[{i}].weight={d.weight} is not a finite number")
            if d.weight < 0:
                raise ObjectiveError(f"objective.denoisers[{i}].weight={d.weight} is negative: use a weight >= 0")
            if d.family == "S":
                self.members.append(PrefixLM(vocab, seq_len, self.architecture))
            else:
                self.members.append(
                    SpanCorruption(
                        vocab,
                        seq_len,
                        self.architecture,
                        mask_rate=d.mask_rate,
                        mean_span_length=d.mean_span_length,
                        raw_length=seq_len,
                        setting=f"objective.denoisers[{i}]",
                    )
                )
        weights = torch.tensor([d.weight for d in denoisers], dtype=torch.float)
        if weights.sum() <= 0:
            raise ObjectiveError("objective.denoisers weights sum to 0: give at least one a positive weight")
        self.denoisers = denoisers
        self.weights = weights / weights.sum()
        self.mode_tokens = mode_tokens

    @property
    def model_length(self) -> int:
        return max(m.model_length for m in self.members) + int(self.mode_tokens)

    def __call__(self, tokens: torch.Tensor, generator: torch.Generator) -> ObjectiveBatch:
        pick = int(torch.multinomial(self.weights.to(tokens.device), 1, generator=generator).item())
        batch = self.members[pick](tokens, generator)
        if self.mode_tokens:
            mode = self.vocab.mode_ids[FAMILIES.index(self.denoisers[pick].family)]
            enc = batch.encoder_inputs
            assert enc is not None  # UL2 trains an encoder-decoder only (architectures)
            batch.encoder_inputs = torch.cat([torch.full_like(enc[:, :1], mode), enc], dim=1)
            mask = batch.encoder_mask
            if mask is not None:
                batch.encoder_mask = torch.cat([torch.ones_like(mask[:, :1]), mask], dim=1)
        return batch
