"""What is hidden, which context is visible, which positions are scored.

Pure torch: `objective(tokens[B, L], generator) -> ObjectiveBatch`. No torch.nn, no Lightning.
"""

from __future__ import annotations

from selfsup.data.vocab import Vocab
from selfsup.objectives.base import IGNORE, Objective, ObjectiveBatch, ObjectiveError
from selfsup.objectives.clm import CausalLM
from selfsup.objectives.mixture import UL2_DENOISERS, Denoiser, Mixture
from selfsup.objectives.mlm import MaskedLM
from selfsup.objectives.prefix import PrefixLM
from selfsup.objectives.span import SpanCorruption, raw_length_for, span_counts, span_lengths

OBJECTIVES: dict[str, type[Objective]] = {
    cls.name: cls for cls in (MaskedLM, CausalLM, SpanCorruption, PrefixLM, Mixture)
}
ARCHITECTURES = ("encoder", "decoder", "encoder_decoder")

# Why a pair is refused (objective, architecture) -> reason; pairs not listed and not allowed by
# the objective get a generic reason.
REFUSALS = {
    ("mlm", "decoder"): "causal attention hides the right context MLM needs",
    ("mlm", "encoder_decoder"): "MLM predicts in place from an encoder; use architecture=encoder",
    ("clm", "encoder"): "bidirectional attention lets a token see its own answer",
    ("clm", "encoder_decoder"): "CLM predicts every next token from one causal stack; use architecture=decoder",
    ("span_corruption", "encoder"): "the spans are written by a decoder; use architecture=encoder_decoder",
    ("span_corruption", "decoder"): "span corruption needs an encoder to read the corrupted input; use architecture=encoder_decoder",
    ("prefix_lm", "encoder"): "bidirectional attention over the predicted part lets a token see its own answer",
    ("ul2", "encoder"): "UL2's span denoisers are written by a decoder; use architecture=encoder_decoder",
    ("ul2", "decoder"): "UL2 here mixes span denoisers that need an encoder; use architecture=encoder_decoder",
}


def default_architecture(objective: str) -> str:
    return OBJECTIVES[objective].architectures[0]


def compatibility_error(objective: str, architecture: str) -> str | None:
    """None when the pair can train, else one line saying why not and what to use."""
    if objective not in OBJECTIVES:
        return f"unknown objective {objective!r}: choose one of {', '.join(OBJECTIVES)}"
    if architecture not in ARCHITECTURES:
        return f"unknown architecture {architecture!r}: choose one of {', '.join(ARCHITECTURES)}"
    allowed = OBJECTIVES[objective].architectures
    if architecture in allowed:
        return None
    why = REFUSALS.get((objective, architecture), f"use one of {', '.join(allowed)}")
    return f"objective={objective} cannot train architecture={architecture}: {why}"


def build_objective(name: str, vocab: Vocab, seq_len: int, architecture: str | None = None, **params) -> Objective:
    problem = compatibility_error(name, architecture or default_architecture(name))
    if problem:
        raise ObjectiveError(problem)
    return OBJECTIVES[name](vocab, seq_len, architecture, **params)


__all__ = [
    "IGNORE", "Objective", "ObjectiveBatch", "ObjectiveError", "Vocab", "CausalLM", "MaskedLM", "SpanCorruption",
    "PrefixLM", "Mixture", "Denoiser", "UL2_DENOISERS", "OBJECTIVES", "ARCHITECTURES", "build_objective",
    "compatibility_error", "default_architecture", "raw_length_for", "span_counts", "span_lengths",
]
