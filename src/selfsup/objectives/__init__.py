"""What is hidden, which context is visible, which positions are scored.

Pure torch: `objective(tokens[B, L], generator) -> ObjectiveBatch`. No torch.nn, no Lightning.

An objective is a subclass of `Objective` (its `name`, the `architectures` it can train, `__call__`)
and a config whose `_target_` names it; selfsup-train builds it with Hydra's `instantiate`. The
built-in ones are below; docs/extending.md adds one from outside the package.
"""

from __future__ import annotations

from selfsup.data.vocab import Vocab
from selfsup.objectives.base import IGNORE, Objective, ObjectiveBatch, ObjectiveError
from selfsup.objectives.clm import CausalLM, CausalLMConfig
from selfsup.objectives.denoising import BartDenoising, DenoisingConfig
from selfsup.objectives.fim import FillInTheMiddle, FimConfig
from selfsup.objectives.gpt_bert import GptBert, GptBertConfig
from selfsup.objectives.mixture import UL2_DENOISERS, Denoiser, Mixture, MixtureConfig
from selfsup.objectives.mlm import MaskedLM, MaskedLMConfig
from selfsup.objectives.prefix import PrefixLM, PrefixLMConfig
from selfsup.objectives.span import SpanCorruption, SpanCorruptionConfig, raw_length_for, span_counts, span_lengths

# the built-in objectives by name, with their configs (conf/objective/<name>.yaml builds on these)
OBJECTIVES: dict[str, type[Objective]] = {
    cls.name: cls
    for cls in (MaskedLM, CausalLM, SpanCorruption, PrefixLM, Mixture, BartDenoising, FillInTheMiddle, GptBert)
}
CONFIGS = {
    "mlm": MaskedLMConfig,
    "clm": CausalLMConfig,
    "span_corruption": SpanCorruptionConfig,
    "prefix_lm": PrefixLMConfig,
    "ul2": MixtureConfig,
    "bart": DenoisingConfig,
    "fim": FimConfig,
    "gpt_bert": GptBertConfig,
}


def build_objective(name: str, vocab: Vocab, seq_len: int, architecture: str | None = None, **params) -> Objective:
    """A built-in objective by name (the library's shortcut; selfsup-train instantiates its config)."""
    if name not in OBJECTIVES:
        raise ObjectiveError(f"unknown objective {name!r}: choose one of {', '.join(OBJECTIVES)}")
    return OBJECTIVES[name](vocab, seq_len, architecture, **params)


__all__ = [
    "BartDenoising",
    "CONFIGS",
    "IGNORE",
    "OBJECTIVES",
    "CausalLM",
    "CausalLMConfig",
    "Denoiser",
    "DenoisingConfig",
    "FillInTheMiddle",
    "FimConfig",
    "GptBert",
    "GptBertConfig",
    "MaskedLM",
    "MaskedLMConfig",
    "Mixture",
    "MixtureConfig",
    "Objective",
    "ObjectiveBatch",
    "ObjectiveError",
    "PrefixLM",
    "PrefixLMConfig",
    "SpanCorruption",
    "SpanCorruptionConfig",
    "UL2_DENOISERS",
    "Vocab",
    "build_objective",
    "raw_length_for",
    "span_counts",
    "span_lengths",
]
