"""The shared contract of every objective: token ids in, an ObjectiveBatch out.

An objective is a pure function of a batch of token ids and a torch.Generator. It decides what
is hidden (the inputs), which context is visible (encoder padding, decoder prefix) and which
positions are scored (targets, -100 where nothing is scored). It knows nothing of models or
Lightning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from selfsup.data.vocab import Vocab
from selfsup.errors import UserError

IGNORE = -100  # target value of a position that is not scored (torch's cross-entropy default)


@dataclass
class ObjectiveBatch:
    """What a model consumes and what the shared step scores.

    targets        [B, T]  token id to predict at each output position of the last stack, -100 where
                           nothing is scored. T equals the length of decoder_inputs when there is a
                           decoder, else the length of encoder_inputs.
    encoder_inputs [B, Le] bidirectional stack input (encoder-only and encoder-decoder), or None.
    decoder_inputs [B, Ld] causal stack input (decoder-only and encoder-decoder), or None.
    encoder_mask   [B, Le] bool, True where the encoder position is a real token (keys that may be
                           attended to, by the encoder and by cross-attention); None: all real.
    prefix_length  [B]     decoder-only prefix LM: positions < prefix_length attend bidirectionally
                           among themselves; None: plain causal.
    n_inputs       scalar  raw (non-pad) tokens of text this batch consumed, for signal per token.
    """

    targets: torch.Tensor
    n_inputs: torch.Tensor
    encoder_inputs: torch.Tensor | None = None
    decoder_inputs: torch.Tensor | None = None
    encoder_mask: torch.Tensor | None = None
    prefix_length: torch.Tensor | None = None

    @property
    def scored(self) -> torch.Tensor:
        return self.targets != IGNORE

    @property
    def n_scored(self) -> torch.Tensor:
        return self.scored.sum()

    def to(self, device: torch.device | str) -> "ObjectiveBatch":
        return replace(
            self,
            **{f.name: getattr(self, f.name).to(device) for f in fields(self) if getattr(self, f.name) is not None},
        )


class ObjectiveError(UserError, ValueError):
    """A bad objective parameter; the message names the parameter and the fix."""


class Objective:
    """Base class. Subclasses set `name` and `architectures` (the first is the default; `refusals` says
    why another one cannot train) and implement `__call__`.

    seq_len is the length of the model input the lab asks for; `raw_length` is the length of the
    text window the objective needs from the data to produce it (e.g. 568 raw tokens give 512
    encoder inputs for span corruption at the T5 defaults; CLM needs seq_len + 1). `name` is the
    objective's label in configs, tables and W&B (default: the class's).
    """

    name = "objective"
    architectures: tuple[str, ...] = ()
    refusals: dict[str, str] = {}  # architecture -> why this objective cannot train it
    scheduled: str | None = None  # the rate objective.schedule moves (mask_rate, noise_density); None: none
    schedule: Any = None  # its rate over training steps: a selfsup.objectives.schedule.Schedule
    infills = False  # trains a decoder to write a middle in FIM's layout (the infilling job reads it so)

    @classmethod
    def incompatibility(cls, architecture: str) -> str | None:
        """None when this objective can train the architecture, else one line saying why not."""
        if architecture in cls.architectures:
            return None
        why = cls.refusals.get(architecture, f"use architecture={' or '.join(cls.architectures)}")
        return f"objective={cls.name} cannot train architecture={architecture}: {why}"

    def __init__(self, vocab: Vocab, seq_len: int, architecture: str | None = None, name: str | None = None):
        if architecture is None:
            architecture = self.architectures[0]
        problem = self.incompatibility(architecture)
        if problem:
            raise ObjectiveError(problem)
        if name is not None:
            self.name = name
        if seq_len < 2:
            raise ObjectiveError(
                f"data.seq_len={seq_len} is too short: {self.name} needs at least 2 tokens, raise data.seq_len"
            )
        self.vocab = vocab
        self.seq_len = seq_len
        self.architecture = architecture

    @property
    def raw_length(self) -> int:
        return self.seq_len

    @property
    def model_length(self) -> int:
        """Longest sequence any stack of the model will see (for its position table)."""
        return self.seq_len

    def __call__(self, tokens: torch.Tensor, generator: torch.Generator) -> ObjectiveBatch:
        raise NotImplementedError

    def at_step(self, step: int | None, total: int | None = None) -> float | None:
        """Set the scheduled rate for the batches of training step `step` (None: validation, which masks at the
        schedule's end value); `total`: the run's max_steps. The rate, or None for an objective without one."""
        if self.schedule is None or self.scheduled is None:
            return None
        rate = self.schedule.end if step is None else self.schedule(step, total)
        setattr(self, self.scheduled, rate)
        return rate

    def is_special(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens < self.vocab.first_ordinary

    def count_inputs(self, tokens: torch.Tensor) -> torch.Tensor:
        return (tokens != self.vocab.pad_id).sum()


def check_finite(name: str, value: float) -> None:
    if not math.isfinite(value):
        raise ObjectiveError(f"{name}={value} is not a finite number: set a number")


def check_probability(
    name: str, value: float, *, open_low: bool = False, open_high: bool = False, why_low: str = "", why_high: str = ""
) -> None:
    check_finite(name, value)
    low_bad = value <= 0 if open_low else value < 0
    high_bad = value >= 1 if open_high else value > 1
    if low_bad or high_bad:
        bounds = f"{'(' if open_low else '['}0, 1{')' if open_high else ']'}"
        why = why_low if low_bad else why_high
        raise ObjectiveError(f"{name}={value} is out of range: use a value in {bounds}" + (f" ({why})" if why else ""))


def check_rate(key: str, value: float) -> None:
    """A mask rate or noise density (or a schedule's end value): strictly between 0 and 1."""
    check_probability(
        key,
        value,
        open_low=True,
        open_high=True,
        why_low="0% hides nothing and teaches nothing",
        why_high="100% leaves no context to predict from",
    )
