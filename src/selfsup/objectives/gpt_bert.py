"""GPT-BERT (Charpentier & Samuel, CoNLL-BabyLM 2024; ltgoslo/gpt-bert): one decoder-shaped model, two kinds of
batches.

    causal  (probability causal_fraction, 1/16)  a causal mask and CLM's loss: position t predicts token t + 1
    masked  (the rest)  a bidirectional mask and masked next-token prediction (MNTP): tokens are hidden as MLM
            hides them (mask_rate, 0.3 -> 0.15 over training by default; of the hidden 80% <mask>, 10% a random
            token, 10% unchanged) and each hidden token is predicted from the *previous* position's output, so the
            head is CLM's; the loss is over the hidden tokens only, normalised by their number

Both read the window of seq_len + 1 tokens as CLM does: the model's input is its first seq_len tokens (in a masked
batch, with tokens 1.. hidden), its targets the window shifted by one. The window's first token is never hidden:
it is the context the second token is predicted from (ltgoslo/gpt-bert puts a <s> there). As there, the last
token's input is dropped, so a hidden last token is predicted with no input of its own. Choices of the lab
(docs/objectives.md): each token is hidden on its own, as the lab's MLM does (GPT-BERT hides spans of 1 to 3
tokens), and each batch's kind is drawn at random (GPT-BERT fixes it per GPU, 15 of 16 masked).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.objectives.base import IGNORE, ObjectiveBatch, check_probability
from selfsup.objectives.mlm import MaskedLM
from selfsup.objectives.schedule import ScheduleConfig

END_RATE = 0.15  # the mask rate at the end of GPT-BERT's linear schedule


@dataclass
class GptBertConfig:
    """objective=gpt_bert (conf/objective/gpt_bert.yaml): GPT-BERT's defaults (its train_10m.py)."""

    _target_: str = "selfsup.objectives.GptBert"
    name: str = "gpt_bert"
    causal_fraction: float = 0.0625  # the share of causal batches (GPT-BERT: 1 in 16)
    mask_rate: float = 0.3  # masked batches: the share of tokens hidden, at the schedule's start
    mask_token_prob: float = 0.8  # of the hidden: become <mask>
    random_token_prob: float = 0.1  # of the hidden: a random token (the rest stay unchanged)
    schedule: ScheduleConfig = field(default_factory=lambda: ScheduleConfig(shape="linear", end=END_RATE))


class GptBert(MaskedLM):
    name = "gpt_bert"
    architectures = (DECODER,)
    refusals = dict.fromkeys(
        (ENCODER, ENCODER_DECODER),
        "GPT-BERT trains one decoder-shaped stack in two attention modes; use architecture=decoder",
    )

    def __init__(self, vocab, seq_len: int, architecture: str | None = None, *, causal_fraction: float = 0.0625,
                 **masking):  # fmt: skip
        masking.setdefault("mask_rate", GptBertConfig.mask_rate)
        masking.setdefault("schedule", ScheduleConfig(shape="linear", end=END_RATE))
        super().__init__(vocab, seq_len, architecture, **masking)
        check_probability("objective.causal_fraction", causal_fraction)
        self.causal_fraction = causal_fraction

    @property
    def raw_length(self) -> int:
        return self.seq_len + 1

    def __call__(self, tokens: torch.Tensor, generator: torch.Generator) -> ObjectiveBatch:
        causal = bool(torch.rand(1, generator=generator, device=tokens.device) < self.causal_fraction)
        n_inputs = self.count_inputs(tokens)
        if causal:
            targets = tokens[:, 1:].masked_fill(tokens[:, 1:] == self.vocab.pad_id, IGNORE)
            return ObjectiveBatch(targets=targets, n_inputs=n_inputs, decoder_inputs=tokens[:, :-1])
        masked = super().__call__(tokens[:, 1:], generator)  # the first token is never hidden
        assert masked.encoder_inputs is not None  # MaskedLM's batch
        inputs = torch.cat([tokens[:, :1], masked.encoder_inputs], dim=1)[:, :-1]
        real = (inputs != self.vocab.pad_id).sum(1)  # bidirectional among the real tokens (padding is at the end)
        return ObjectiveBatch(targets=masked.targets, n_inputs=n_inputs, decoder_inputs=inputs, prefix_length=real)
