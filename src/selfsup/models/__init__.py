"""Model layer: one pre-norm transformer in three assemblies (see transformer.py)."""

from selfsup.models.transformer import (
    ACTIVATIONS,
    MODEL_NAMES,
    MLP,
    Attention,
    Block,
    Decoder,
    Encoder,
    EncoderDecoder,
    Stack,
    TransformerModel,
    build_model,
    pad_vocab_size,
)

__all__ = [
    "ACTIVATIONS",
    "MODEL_NAMES",
    "MLP",
    "Attention",
    "Block",
    "Decoder",
    "Encoder",
    "EncoderDecoder",
    "Stack",
    "TransformerModel",
    "build_model",
    "pad_vocab_size",
]
