"""The model layer: one pre-norm transformer, three assemblies (nanoGPT style, plain PyTorch).

    Encoder         bidirectional stack          forward(encoder_inputs, encoder_mask)
    Decoder         causal (or prefix-LM) stack  forward(decoder_inputs, prefix_length)
    EncoderDecoder  encoder + causal decoder with cross-attention to the encoder output

Each takes a `TransformerConfig` (its shape: conf/architecture/<name>.yaml instantiates one) and the
vocabulary size and number of positions the data give: `TransformerConfig(name="decoder").build(vocab_size,
max_len)`.

All three accept the same keyword arguments (encoder_inputs, decoder_inputs, encoder_mask,
prefix_length) and ignore the ones they do not use, so a caller can pass a whole batch. forward
returns the final hidden states (after the last LayerNorm); `head(hidden)` is the output
projection alone, so a caller can select the scored positions first: `model.head(h[scored])`.
Training does not call `head`: selfsup.loss fuses `lm_head.weight` with the cross-entropy.

The vocabulary is padded up to a multiple of 64; `head` sets the logits of the padding ids to
-inf so they get no probability. Slice `logits[..., :model.vocab_size]` before anything that
multiplies every log-probability by a weight (label smoothing, soft targets, entropy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

VOCAB_MULTIPLE = 64


def pad_vocab_size(vocab_size: int, multiple: int = VOCAB_MULTIPLE) -> int:
    return math.ceil(vocab_size / multiple) * multiple


class Attention(nn.Module):
    """Multi-head attention through SDPA; self-attention, or cross-attention when given a context.

    One [3 d_model, d_model] projection holds the query, key and value weights: self-attention
    applies it in one matmul; cross-attention applies its query rows to x, the rest to the context.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float, bias: bool = True):
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)  # residual output projection
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x, context=None, mask=None, is_causal=False):
        """mask: bool broadcastable to [B, 1, Lq, Lk], True = may attend."""
        B, Lq, D = x.shape
        H = self.n_heads
        if context is None:
            q, k, v = (t.view(B, Lq, H, D // H).transpose(1, 2) for t in self.qkv(x).split(D, dim=-1))
        else:
            w, b = self.qkv.weight, self.qkv.bias
            q = F.linear(x, w[:D], None if b is None else b[:D]).view(B, Lq, H, D // H).transpose(1, 2)
            k, v = (
                t.view(B, -1, H, D // H).transpose(1, 2)
                for t in F.linear(context, w[D:], None if b is None else b[D:]).split(D, dim=-1)
            )
        has_key = None
        if mask is not None:
            # A query with no key (e.g. an all-padding encoder row) would make SDPA return NaN:
            # let it attend everywhere, then zero its output, so it reads nothing.
            has_key = mask.any(dim=-1, keepdim=True)
            mask = mask | ~has_key
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=self.dropout if self.training else 0.0
        )
        if has_key is not None:
            y = y * has_key
        y = y.transpose(1, 2).reshape(B, Lq, D)
        return self.resid_dropout(self.proj(y))


ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu_}  # relu in place on the fc output (which no backward needs)


class MLP(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float, bias: bool = True, activation: str = "gelu"):
        super().__init__()
        self.fc = nn.Linear(d_model, d_ff, bias=bias)
        self.act = ACTIVATIONS[activation]
        self.proj = nn.Linear(d_ff, d_model, bias=bias)  # residual output projection
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.proj(self.act(self.fc(x))))


class Block(nn.Module):
    """Pre-norm block: self-attention, optional cross-attention, MLP, each on a residual branch."""

    def __init__(self, d_model, n_heads, d_ff, dropout, cross_attention=False, bias=True, activation="gelu"):
        super().__init__()
        self.ln_attn = nn.LayerNorm(d_model, bias=bias)
        self.attn = Attention(d_model, n_heads, dropout, bias)
        self.ln_cross = nn.LayerNorm(d_model, bias=bias) if cross_attention else None
        self.cross_attn = Attention(d_model, n_heads, dropout, bias) if cross_attention else None
        self.ln_mlp = nn.LayerNorm(d_model, bias=bias)
        self.mlp = MLP(d_model, d_ff, dropout, bias, activation)

    def forward(self, x, mask=None, is_causal=False, context=None, context_mask=None):
        x = x + self.attn(self.ln_attn(x), mask=mask, is_causal=is_causal)
        if self.cross_attn is not None:
            x = x + self.cross_attn(self.ln_cross(x), context=context, mask=context_mask)
        return x + self.mlp(self.ln_mlp(x))


class Stack(nn.Module):
    """Position embedding, blocks, final LayerNorm. Token embedding lives in the model (shared)."""

    def __init__(
        self, n_layers, max_len, d_model, n_heads, d_ff, dropout, cross_attention=False, bias=True, activation="gelu"
    ):
        super().__init__()
        self.pos_emb = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(d_model, n_heads, d_ff, dropout, cross_attention, bias, activation) for _ in range(n_layers)
        )
        self.ln_f = nn.LayerNorm(d_model, bias=bias)

    def forward(self, tok, mask=None, is_causal=False, context=None, context_mask=None, activation_checkpointing=False):
        x = self.dropout(tok + self.pos_emb(torch.arange(tok.shape[1], device=tok.device)))
        for block in self.blocks:
            if activation_checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(block, x, mask, is_causal, context, context_mask, use_reentrant=False)
            else:
                x = block(x, mask, is_causal, context, context_mask)
        return self.ln_f(x)


@dataclass
class TransformerConfig:
    """The shape of a model: `architecture=encoder|decoder|encoder_decoder` (conf/architecture/) fill it in.

    Also the structured config of the `architecture` group (its `_target_` makes Hydra's `instantiate`
    return this object); `build(vocab_size, max_len)` makes the model."""

    _target_: str = "selfsup.models.TransformerConfig"
    name: str = "encoder"  # encoder | decoder | encoder_decoder
    d_model: int = 256
    n_layers: int = 4  # blocks per stack (an encoder-decoder has n_layers + n_decoder_layers)
    n_heads: int = 4
    d_ff: Optional[int] = None  # default 4 * d_model
    n_decoder_layers: Optional[int] = None  # encoder_decoder; default n_layers
    dropout: float = 0.0
    tie_embeddings: bool = True
    activation: str = "gelu"  # feed-forward nonlinearity: gelu (BERT, GPT-2) | relu (T5)
    bias: bool = True  # biases in linear layers and LayerNorms (T5 has none)
    activation_checkpointing: bool = field(default=False, metadata={"fingerprint": False})

    def __post_init__(self):
        """Every check of a shape lives here: a config that exists can be built."""
        if self.name not in MODELS:
            raise ValueError(f"architecture.name={self.name} is unknown: use one of {', '.join(MODELS)}")
        for key in ("d_model", "n_layers", "n_heads", "d_ff", "n_decoder_layers"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise ValueError(f"architecture.{key}={value} must be at least 1")
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"architecture.d_model={self.d_model} is not divisible by n_heads={self.n_heads}: "
                f"choose n_heads that divides d_model (e.g. n_heads={math.gcd(self.d_model, self.n_heads)})"
                f" or a d_model that is a multiple of {self.n_heads}"
            )
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"architecture.activation={self.activation} is unknown: use one of {', '.join(ACTIVATIONS)}"
            )
        if not 0 <= self.dropout < 1:
            raise ValueError(f"architecture.dropout={self.dropout} must be in [0, 1)")

    def build(self, vocab_size: int, max_len: int) -> "TransformerModel":
        return MODELS[self.name](self, vocab_size, max_len)


class TransformerModel(nn.Module):
    """Shared parts of the three assemblies: token embedding, head, init, parameter count."""

    arch = "?"

    def __init__(self, config: TransformerConfig, vocab_size: int, max_len: int):
        super().__init__()
        c = self.config = config
        if vocab_size < 1 or max_len < 1:
            raise ValueError(f"vocab_size={vocab_size} and max_len={max_len} must both be >= 1")
        self.vocab_size = vocab_size
        self.bias, self.activation = c.bias, c.activation
        self.padded_vocab_size = pad_vocab_size(vocab_size)
        self.max_len = max_len
        self.d_model = c.d_model
        self.n_heads = c.n_heads
        self.d_ff = c.d_ff or 4 * c.d_model
        self.dropout_p = c.dropout
        self.activation_checkpointing = c.activation_checkpointing
        self.tok_emb = nn.Embedding(self.padded_vocab_size, c.d_model)
        self.lm_head = nn.Linear(c.d_model, self.padded_vocab_size, bias=False)
        if c.tie_embeddings:
            self.lm_head.weight = self.tok_emb.weight
        self.register_buffer("vocab_padding", torch.arange(self.padded_vocab_size) >= vocab_size, persistent=False)

    def _stack(self, n_layers, cross_attention=False):
        return Stack(
            n_layers,
            self.max_len,
            self.d_model,
            self.n_heads,
            self.d_ff,
            self.dropout_p,
            cross_attention,
            self.bias,
            self.activation,
        )

    def _init_weights(self):
        """GPT-2 init: N(0, 0.02), zero biases, residual projections scaled by 1/sqrt(2*n_layers)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for stack in self.children():
            if isinstance(stack, Stack):
                std = 0.02 / math.sqrt(2 * len(stack.blocks))
                for name, p in stack.named_parameters():
                    if name.endswith("proj.weight"):  # attn.proj, cross_attn.proj, mlp.proj
                        nn.init.normal_(p, mean=0.0, std=std)

    def _embed(self, ids: torch.Tensor, what: str) -> torch.Tensor:
        if ids is None:
            raise ValueError(f"{type(self).__name__} needs {what}: pass {what}=LongTensor[B, L]")
        if ids.dim() != 2:
            raise ValueError(f"{what} must be [batch, length], got shape {tuple(ids.shape)}")
        if ids.shape[1] > self.max_len:
            raise ValueError(
                f"{what} has length {ids.shape[1]} > max_len={self.max_len}: raise max_len "
                f"(architecture.max_len) or feed shorter sequences"
            )
        return self.tok_emb(ids)

    def _key_padding(self, encoder_mask, ids):
        if encoder_mask is None:
            return None
        if encoder_mask.shape != ids.shape:
            raise ValueError(
                f"encoder_mask shape {tuple(encoder_mask.shape)} != encoder_inputs shape {tuple(ids.shape)}"
            )
        return encoder_mask.bool()[:, None, None, :]  # [B, 1, 1, Lk], broadcast over heads and queries

    def head(self, hidden: torch.Tensor) -> torch.Tensor:
        """Output projection only: [..., d_model] -> [..., padded_vocab_size]; padding ids get -inf."""
        logits = self.lm_head(hidden)
        if self.padded_vocab_size > self.vocab_size:
            logits = logits.masked_fill(self.vocab_padding, float("-inf"))
        return logits

    def num_parameters(self) -> int:
        """Unique parameters (a tied embedding/head counted once)."""
        return sum(p.numel() for p in self.parameters())


class Encoder(TransformerModel):
    arch = "encoder"

    def __init__(self, config: TransformerConfig, vocab_size: int, max_len: int):
        super().__init__(config, vocab_size, max_len)
        self.encoder = self._stack(config.n_layers)
        self._init_weights()

    def forward(self, encoder_inputs=None, encoder_mask=None, decoder_inputs=None, prefix_length=None):
        x = self._embed(encoder_inputs, "encoder_inputs")
        return self.encoder(
            x,
            mask=self._key_padding(encoder_mask, encoder_inputs),
            activation_checkpointing=self.activation_checkpointing,
        )


class Decoder(TransformerModel):
    arch = "decoder"

    def __init__(self, config: TransformerConfig, vocab_size: int, max_len: int):
        super().__init__(config, vocab_size, max_len)
        self.decoder = self._stack(config.n_layers)
        self._init_weights()

    def forward(self, decoder_inputs=None, prefix_length=None, encoder_inputs=None, encoder_mask=None):
        x = self._embed(decoder_inputs, "decoder_inputs")
        if prefix_length is None:
            return self.decoder(x, is_causal=True, activation_checkpointing=self.activation_checkpointing)
        # prefix LM: query q may attend key k iff k <= q or k < prefix_length[b]
        B, L = decoder_inputs.shape
        prefix_length = torch.as_tensor(prefix_length, device=x.device).reshape(-1, 1, 1)
        if prefix_length.shape[0] not in (1, B):
            raise ValueError(
                f"prefix_length must have shape [{B}] (one per sequence), got {prefix_length.shape[0]} values"
            )
        pos = torch.arange(L, device=x.device)
        mask = (pos[None, :] <= pos[:, None])[None] | (pos[None, None, :] < prefix_length)  # [B, L, L]
        return self.decoder(x, mask=mask[:, None], activation_checkpointing=self.activation_checkpointing)


class EncoderDecoder(TransformerModel):
    arch = "encoder_decoder"

    def __init__(self, config: TransformerConfig, vocab_size: int, max_len: int):
        super().__init__(config, vocab_size, max_len)
        self.encoder = self._stack(config.n_layers)
        self.decoder = self._stack(
            config.n_layers if config.n_decoder_layers is None else config.n_decoder_layers, cross_attention=True
        )
        self._init_weights()

    def forward(self, encoder_inputs=None, decoder_inputs=None, encoder_mask=None, prefix_length=None):
        """The decoder's hidden states; without decoder_inputs, the encoder's (features of the input text)."""
        enc = self._embed(encoder_inputs, "encoder_inputs")
        if decoder_inputs is None:
            return self.encoder(
                enc,
                mask=self._key_padding(encoder_mask, encoder_inputs),
                activation_checkpointing=self.activation_checkpointing,
            )
        dec = self._embed(decoder_inputs, "decoder_inputs")
        if decoder_inputs.shape[0] != encoder_inputs.shape[0]:
            raise ValueError(
                f"encoder_inputs batch {encoder_inputs.shape[0]} != decoder_inputs batch {decoder_inputs.shape[0]}"
            )
        keys = self._key_padding(encoder_mask, encoder_inputs)
        memory = self.encoder(enc, mask=keys, activation_checkpointing=self.activation_checkpointing)
        return self.decoder(
            dec,
            is_causal=True,
            context=memory,
            context_mask=keys,
            activation_checkpointing=self.activation_checkpointing,
        )


MODELS = {"encoder": Encoder, "decoder": Decoder, "encoder_decoder": EncoderDecoder}
MODEL_NAMES = tuple(MODELS)


def build_model(name: str, vocab_size: int, max_len: int, **shape) -> TransformerModel:
    """A model by name with the TransformerConfig fields in `shape` (the library's shortcut)."""
    return TransformerConfig(name=name, **shape).build(vocab_size, max_len)
