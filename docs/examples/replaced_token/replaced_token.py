"""Replaced-token LM: hide nothing, swap a share of the tokens for random ones, and predict the original
token at each swapped position (ELECTRA's corruption, scored as a generator would be). An objective
defined outside the selfsup package (docs/extending.md)."""

import torch

from selfsup.objectives import IGNORE, Objective, ObjectiveBatch, ObjectiveError


class ReplacedTokenLM(Objective):
    name = "replaced_token"
    architectures = ("encoder",)  # it reads both sides of a swapped token
    refusals = {"decoder": "a causal decoder cannot see the right context of a swapped token"}

    def __init__(self, vocab, seq_len, architecture=None, *, replace_rate: float = 0.15, name=None):
        super().__init__(vocab, seq_len, architecture, name)
        if not 0 < replace_rate < 1:
            raise ObjectiveError(f"objective.replace_rate={replace_rate} must be between 0 and 1")
        self.replace_rate = replace_rate

    def __call__(self, tokens: torch.Tensor, generator: torch.Generator) -> ObjectiveBatch:
        swap = torch.rand(tokens.shape, generator=generator, device=tokens.device) < self.replace_rate
        swap &= ~self.is_special(tokens)
        random = torch.randint(self.vocab.first_ordinary, self.vocab.size, tokens.shape, generator=generator,
                               device=tokens.device, dtype=tokens.dtype)
        return ObjectiveBatch(targets=torch.where(swap, tokens, IGNORE), n_inputs=self.count_inputs(tokens),
                              encoder_inputs=torch.where(swap, random, tokens))
