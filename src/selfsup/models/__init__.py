"""Model layer: one pre-norm transformer in three assemblies (see transformer.py)."""

from selfsup.models.transformer import (
    ACTIVATIONS,
    MLP,
    MODEL_NAMES,
    MODELS,
    Attention,
    Block,
    Decoder,
    Encoder,
    EncoderDecoder,
    Stack,
    TransformerConfig,
    TransformerModel,
    build_model,
    pad_vocab_size,
)

__all__ = [
    "ACTIVATIONS",
    "MODEL_NAMES",
    "MODELS",
    "MLP",
    "Attention",
    "Block",
    "Decoder",
    "Encoder",
    "EncoderDecoder",
    "Stack",
    "TransformerConfig",
    "TransformerModel",
    "build_model",
    "pad_vocab_size",
]
