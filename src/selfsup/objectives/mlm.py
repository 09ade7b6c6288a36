"""Masked LM (BERT): hide ~15% of tokens, predict them from both sides; score only the hidden."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.data.vocab import Vocab
from selfsup.objectives.base import IGNORE, Objective, ObjectiveBatch, ObjectiveError, check_probability, check_rate
from selfsup.objectives.schedule import ScheduleConfig, make_schedule


@dataclass
class MaskedLMConfig:
    """objective=mlm (conf/objective/mlm.yaml): the settings MaskedLM takes."""

    _target_: str = "selfsup.objectives.MaskedLM"
    name: str = "mlm"
    mask_rate: float = 0.15  # fraction of ordinary tokens hidden and scored
    mask_token_prob: float = 0.8  # of those: become <mask>
    random_token_prob: float = 0.1  # of those: become a random token (the rest stay unchanged)
    whole_word: bool = False  # hide whole words
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)  # mask_rate over steps (its start value)


class MaskedLM(Objective):
    """Each ordinary token is chosen independently with probability mask_rate.

    With objective.schedule, mask_rate is the start of a schedule over training steps (selfsup.objectives.schedule).
    Of the chosen: mask_token_prob become <mask>, random_token_prob a random ordinary token, the
    rest stay unchanged but are still scored. Special tokens (pad, bos, eos, mask, sentinels) are
    never chosen. With whole_word, the choice is made per word (a word starts at a token carrying
    the byte-level BPE space marker) so all pieces of a word are hidden together.
    """

    name = "mlm"
    scheduled = "mask_rate"
    architectures = (ENCODER,)
    refusals = {
        DECODER: "causal attention hides the right context MLM needs",
        ENCODER_DECODER: "MLM predicts in place from an encoder; use architecture=encoder",
    }

    def __init__(
        self,
        vocab: Vocab,
        seq_len: int,
        architecture: str | None = None,
        *,
        mask_rate: float = MaskedLMConfig.mask_rate,
        mask_token_prob: float = MaskedLMConfig.mask_token_prob,
        random_token_prob: float = MaskedLMConfig.random_token_prob,
        whole_word: bool = MaskedLMConfig.whole_word,
        schedule=None,
        name: str | None = None,
    ):
        super().__init__(vocab, seq_len, architecture, name)
        check_rate("objective.mask_rate", mask_rate)
        self.schedule = make_schedule(mask_rate, schedule, check_rate)
        check_probability("objective.mask_token_prob", mask_token_prob)
        check_probability("objective.random_token_prob", random_token_prob)
        if mask_token_prob + random_token_prob > 1:
            raise ObjectiveError(
                f"objective.mask_token_prob + objective.random_token_prob = "
                f"{mask_token_prob + random_token_prob:g} exceeds 1: they split the chosen tokens, "
                f"so make them sum to at most 1 (BERT: 0.8 and 0.1)"
            )
        if whole_word and vocab.word_start is None:
            raise ObjectiveError(
                "objective.whole_word=true needs a vocabulary with word-start "
                "markers (a byte-level BPE tokenizer): set objective.whole_word=false"
            )
        self.mask_rate = mask_rate
        self.mask_token_prob = mask_token_prob
        self.random_token_prob = random_token_prob
        self.whole_word = whole_word

    def __call__(self, tokens: torch.Tensor, generator: torch.Generator) -> ObjectiveBatch:
        B, L = tokens.shape
        device = tokens.device
        special = self.is_special(tokens)
        if self.whole_word:
            assert self.vocab.word_start is not None  # refused in __init__ otherwise
            # word id of each token: number of word starts up to and including it
            starts = self.vocab.word_start.to(device)[tokens] | special
            word = starts.cumsum(dim=1)
            draw = torch.rand(B, L + 1, generator=generator, device=device)
            chosen = draw.gather(1, word) < self.mask_rate
        else:
            chosen = torch.rand(B, L, generator=generator, device=device) < self.mask_rate
        chosen &= ~special

        how = torch.rand(B, L, generator=generator, device=device)
        to_mask = chosen & (how < self.mask_token_prob)
        to_random = chosen & (how >= self.mask_token_prob) & (how < self.mask_token_prob + self.random_token_prob)
        random_ids = torch.randint(
            self.vocab.first_ordinary, self.vocab.size, (B, L), generator=generator, device=device, dtype=tokens.dtype
        )
        inputs = torch.where(to_mask, torch.full_like(tokens, self.vocab.mask_id), tokens)
        inputs = torch.where(to_random, random_ids, inputs)
        targets = torch.where(chosen, tokens, torch.full_like(tokens, IGNORE))
        return ObjectiveBatch(targets=targets, n_inputs=self.count_inputs(tokens), encoder_inputs=inputs)
