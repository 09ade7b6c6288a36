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

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.models.positions import RelativePositionBias, fold_mask

VOCAB_MULTIPLE = 64


def pad_vocab_size(vocab_size: int, multiple: int = VOCAB_MULTIPLE) -> int:
    return math.ceil(vocab_size / multiple) * multiple


class Attention(nn.Module):
    """Multi-head attention through SDPA; self-attention, or cross-attention when given a context.

    One [3 d_model, d_model] projection holds the query, key and value weights: self-attention
    applies it in one matmul; cross-attention applies its query rows to x, the rest to the context.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float, bias: bool = True, scale: bool = True):
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.scale = None if scale else 1.0  # SDPA's: 1/sqrt(d_head), or unscaled scores (T5)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.proj = nn.Linear(d_model, d_model, bias=bias)  # residual output projection
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x, context=None, mask=None, is_causal=False, position_bias=None, cache=None, same=None):
        """mask: bool broadcastable to [B, 1, Lq, Lk], True = may attend; position_bias: the stack's float mask
        (fold_mask: a relative position bias with mask and causality folded in), used in their place; cache: a
        KVCache (decoding), which keeps the keys and values (KVCache.update); same: (one, each) where x's rows
        [B * Lq] are x.view(-1, D)[one][each] (identical inputs: the projection computed once for each)."""
        B, Lq, D = x.shape
        H = self.n_heads
        if context is None:
            qkv = self.qkv(x) if same is None else self.qkv(x.reshape(-1, D)[same[0]])[same[1]].view(B, Lq, 3 * D)
            q, k, v = (t.view(B, Lq, H, D // H).transpose(1, 2) for t in qkv.split(D, dim=-1))
        else:
            w, b = self.qkv.weight, self.qkv.bias
            q = F.linear(x, w[:D], None if b is None else b[:D]).view(B, Lq, H, D // H).transpose(1, 2)
            kv = None if cache is None else cache.kv.get(self)  # decoding: the first step's projection, kept
            k, v = kv or (
                t.view(B, -1, H, D // H).transpose(1, 2)
                for t in F.linear(context, w[D:], None if b is None else b[D:]).split(D, dim=-1)
            )
        if cache is not None:
            k, v = cache.update(self, k, v, cross=context is not None)
        has_key = None
        if mask is not None:
            # A query with no key (e.g. an all-padding encoder row) would make SDPA return NaN:
            # let it attend everywhere, then zero its output, so it reads nothing.
            has_key = mask.any(dim=-1, keepdim=True)
            mask = mask | ~has_key
        if position_bias is not None:
            mask, is_causal = position_bias, False
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=is_causal,
            dropout_p=self.dropout if self.training else 0.0,
            scale=self.scale,
        )
        if has_key is not None:
            y = y * has_key
        y = y.transpose(1, 2).reshape(B, Lq, D)
        return self.resid_dropout(self.proj(y))


def _gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


# relu in place on the fc output (which no backward needs); gelu_new: GELU's tanh approximation (GPT-2's, as
# transformers names it); gated-gelu: T5 v1.1's gelu_new(x W_gate) * (x W_fc)
ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu_, "gelu_new": _gelu_tanh, "gated-gelu": _gelu_tanh}


class MLP(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float, bias: bool = True, activation: str = "gelu"):
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=bias) if activation.startswith("gated-") else None
        self.fc = nn.Linear(d_model, d_ff, bias=bias)
        self.act = ACTIVATIONS[activation]
        self.proj = nn.Linear(d_ff, d_model, bias=bias)  # residual output projection
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        if self.gate is not None:
            return self.dropout(self.proj(self.act(self.gate(x)) * self.fc(x)))
        return self.dropout(self.proj(self.act(self.fc(x))))


def norm_layer(kind: str, d_model: int, bias: bool) -> nn.Module:
    """layernorm (mean and variance, a bias unless bias=false) or rmsnorm (T5's: no mean, no bias, eps 1e-6)."""
    return nn.RMSNorm(d_model, eps=1e-6) if kind == "rmsnorm" else nn.LayerNorm(d_model, bias=bias)


class Block(nn.Module):
    """Pre-norm block: self-attention, optional cross-attention, MLP, each on a residual branch."""

    def __init__(self, c: "TransformerConfig", d_ff: int, cross_attention: bool = False):
        super().__init__()
        d, h, p, bias = c.d_model, c.n_heads, c.dropout, c.bias
        self.ln_attn = norm_layer(c.norm, d, bias)
        self.attn = Attention(d, h, p, bias, c.scale_attention)
        self.ln_cross = norm_layer(c.norm, d, bias) if cross_attention else None
        self.cross_attn = Attention(d, h, p, bias, c.scale_attention) if cross_attention else None
        self.ln_mlp = norm_layer(c.norm, d, bias)
        self.mlp = MLP(d, d_ff, p, bias, c.activation)

    def forward(
        self,
        x,
        mask=None,
        is_causal=False,
        context=None,
        context_mask=None,
        position_bias=None,
        query=None,
        cache=None,
        same=None,
    ):
        """query: a position per row [B] (a non-causal stack): only those positions' states come out, [B, 1, d],
        each read from its whole row (the block computed at the queries alone); cache: Attention's (decoding);
        same: Attention's (identical rows of x, the attention's projection computed once for each)."""
        if query is not None:
            h, rows = self.ln_attn(x), torch.arange(len(x), device=x.device)
            if position_bias is not None:  # [1 or B, H, L, L] -> the queries' rows [B, H, 1, L]
                position_bias = position_bias.expand(len(x), -1, -1, -1)[rows, :, query][:, :, None]
            picked = h[rows, query][:, None]
            x = x[rows, query][:, None] + self.attn(picked, context=h, mask=mask, position_bias=position_bias)
            return x + self.mlp(self.ln_mlp(x))
        x = x + self.attn(
            self.ln_attn(x), mask=mask, is_causal=is_causal, position_bias=position_bias, cache=cache, same=same
        )
        if self.cross_attn is not None:
            x = x + self.cross_attn(self.ln_cross(x), context=context, mask=context_mask, cache=cache)
        return x + self.mlp(self.ln_mlp(x))


class Stack(nn.Module):
    """Positions (learned embeddings, or T5's relative bias), blocks, final norm. Token embedding lives in the
    model (shared)."""

    def __init__(
        self, c: "TransformerConfig", n_layers: int, max_len: int, d_ff: int, cross_attention=False, causal=False
    ):
        super().__init__()
        relative = c.positions == "relative"
        self.pos_emb = None if relative else nn.Embedding(max_len, c.d_model)
        self.rel_bias = (
            RelativePositionBias(c.n_heads, c.relative_buckets, c.relative_max_distance, bidirectional=not causal)
            if relative
            else None
        )
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(Block(c, d_ff, cross_attention) for _ in range(n_layers))
        self.ln_f = norm_layer(c.norm, c.d_model, c.bias)

    def forward(
        self,
        tok,
        mask=None,
        is_causal=False,
        context=None,
        context_mask=None,
        activation_checkpointing=False,
        query=None,
        same=None,
    ):
        """[B, L, d] final states; query (a position per row [B], non-causal stacks): [B, d], those positions'
        alone, the last block computed at them only (a pseudo-log-likelihood's masked copies: one scored
        position per row); same: `same_inputs` of the tokens (the first block's attention projection computed
        once for each distinct token at each position)."""
        L = tok.shape[1]
        bias = None
        if self.rel_bias is not None:  # T5's bias, with the masks folded in once for every layer
            bias, is_causal = fold_mask(self.rel_bias(L, tok.device), mask, is_causal), False
        x = tok if self.pos_emb is None else tok + self.pos_emb(torch.arange(L, device=tok.device))
        x = self.dropout(x)
        if query is not None and is_causal:
            raise ValueError("query= reads each position from its whole row: a causal stack has no such state")
        for i, block in enumerate(self.blocks):
            if query is not None and i == len(self.blocks) - 1:
                return self.ln_f(block(x, mask, is_causal, context, context_mask, bias, query=query)[:, 0])
            if activation_checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(block, x, mask, is_causal, context, context_mask, bias, use_reentrant=False)
            else:
                x = block(x, mask, is_causal, context, context_mask, bias, same=same if i == 0 else None)
        return self.ln_f(x)

    def decode(self, tok, positions, cache, context=None, context_mask=None):
        """A causal stack's final states [B, Lq, d] of tok [B, Lq, d] (embedded tokens) at positions [B, Lq], each
        reading the keys and values at its own position and earlier ones, which `cache` (a KVCache) keeps."""
        mask = cache.step(positions)
        bias = None
        if self.rel_bias is not None:
            bias = fold_mask(self.rel_bias(mask.shape[-1], tok.device, positions), mask, False)
        x = self.dropout(tok if self.pos_emb is None else tok + self.pos_emb(positions))
        for block in self.blocks:
            x = block(x, mask, False, context, context_mask, bias, cache=cache)
        return self.ln_f(x)


@dataclass
class TransformerConfig:
    """The shape of a model: `architecture=encoder|decoder|encoder_decoder` (conf/architecture/) fill it in.

    Also the structured config of the `architecture` group (its `_target_` makes Hydra's `instantiate`
    return this object); `build(vocab_size, max_len)` makes the model."""

    _target_: str = "selfsup.models.TransformerConfig"
    name: str = ENCODER  # encoder | decoder | encoder_decoder
    d_model: int = 256
    n_layers: int = 4  # blocks per stack (an encoder-decoder has n_layers + n_decoder_layers)
    n_heads: int = 4
    d_ff: Optional[int] = None  # default 4 * d_model
    n_decoder_layers: Optional[int] = None  # encoder_decoder; default n_layers
    dropout: float = 0.0
    tie_embeddings: bool = True
    activation: str = "gelu"  # feed-forward: gelu (BERT) | gelu_new (GPT-2) | relu (T5 v1.0) | gated-gelu (T5 v1.1)
    bias: bool = True  # biases in linear layers and LayerNorms (T5 has none)
    norm: str = "layernorm"  # layernorm (BERT, GPT-2) | rmsnorm (T5: no mean, no bias)
    positions: str = "learned"  # learned absolute embeddings | relative (T5's bias per head and distance bucket)
    relative_buckets: int = 32  # positions=relative: buckets of relative distance (T5's)
    relative_max_distance: int = 128  # positions=relative: distances beyond it share the last bucket
    scale_attention: bool = True  # scores q.k / sqrt(d_head); false: unscaled (T5)
    init: str = "gpt2"  # gpt2: N(0, 0.02), residual projections / sqrt(2 n_layers) | t5: T5's (transformers')
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
        for key, allowed in (
            ("norm", ("layernorm", "rmsnorm")),
            ("positions", ("learned", "relative")),
            ("init", ("gpt2", "t5")),
        ):
            if getattr(self, key) not in allowed:
                raise ValueError(f"architecture.{key}={getattr(self, key)} is unknown: use one of {', '.join(allowed)}")
        if self.relative_buckets < 4 or self.relative_max_distance <= self.relative_buckets // 4:
            raise ValueError(
                f"architecture.relative_buckets={self.relative_buckets} and relative_max_distance="
                f"{self.relative_max_distance}: use at least 4 buckets and a distance above a quarter of them"
            )

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

    def _stack(self, n_layers, cross_attention=False, causal=False):
        return Stack(self.config, n_layers, self.max_len, self.d_ff, cross_attention, causal)

    def _init_weights(self):
        """GPT-2 init: N(0, 0.02), zero biases, residual projections scaled by 1/sqrt(2*n_layers); or T5's."""
        if self.config.init == "t5":
            return self._init_t5()
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

    def _init_t5(self):
        """T5's init as transformers' T5PreTrainedModel does it (factor 1): embeddings and an untied head N(0, 1);
        a layer reading d_model features N(0, d_model^-0.5) (the query's rows N(0, (d_model d_head)^-0.5)), the
        feed-forward's output N(0, d_ff^-0.5); the relative position bias N(0, d_model^-0.5); norms 1."""
        d = self.d_model
        for module in self.modules():
            if isinstance(module, (nn.Linear, RelativePositionBias)):
                nn.init.normal_(module.weight if isinstance(module, nn.Linear) else module.bias.weight, std=d**-0.5)
        for module in self.modules():  # (after: modules() yields an Attention before its qkv Linear)
            if isinstance(module, Attention):
                nn.init.normal_(module.qkv.weight[:d], std=(d * d // self.n_heads) ** -0.5)
            if isinstance(module, MLP):
                nn.init.normal_(module.proj.weight, std=self.d_ff**-0.5)
        nn.init.normal_(self.tok_emb.weight, std=1.0)
        nn.init.normal_(self.lm_head.weight, std=1.0)

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


def same_inputs(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(one, each): ids.view(-1)[one] holds each distinct (token, position) of ids [B, L] once, and row r of the
    flattened [B * L] is row each[r] of those: the same token at the same position is the same first-block input.
    A pseudo-log-likelihood's masked copies of a sentence share all but one: its first block projects ~1/L of them."""
    L = ids.shape[1]
    each_key = (ids * L + torch.arange(L, device=ids.device)).view(-1)
    keys, each = torch.unique(each_key, return_inverse=True)
    one = torch.empty(len(keys), dtype=torch.long, device=ids.device)
    one.scatter_(0, each, torch.arange(len(each_key), device=ids.device))
    return one, each


class Encoder(TransformerModel):
    arch = ENCODER

    def __init__(self, config: TransformerConfig, vocab_size: int, max_len: int):
        super().__init__(config, vocab_size, max_len)
        self.encoder = self._stack(config.n_layers)
        self._init_weights()

    def forward(self, encoder_inputs=None, encoder_mask=None, decoder_inputs=None, prefix_length=None, positions=None):
        """[B, L, d] states; positions (one per row, [B]): [B, d], those positions' states alone (cheaper)."""
        x = self._embed(encoder_inputs, "encoder_inputs")
        return self.encoder(
            x,
            mask=self._key_padding(encoder_mask, encoder_inputs),
            activation_checkpointing=self.activation_checkpointing,
            query=positions,
            same=same_inputs(encoder_inputs) if positions is not None and not self.training else None,
        )


class Decoder(TransformerModel):
    arch = DECODER

    def __init__(self, config: TransformerConfig, vocab_size: int, max_len: int):
        super().__init__(config, vocab_size, max_len)
        self.decoder = self._stack(config.n_layers, causal=True)
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
        if bool((prefix_length >= L).all()):  # every row bidirectional (GPT-BERT's masked batches): no mask at all
            return self.decoder(x, activation_checkpointing=self.activation_checkpointing)
        pos = torch.arange(L, device=x.device)
        mask = (pos[None, :] <= pos[:, None])[None] | (pos[None, None, :] < prefix_length)  # [B, L, L]
        return self.decoder(x, mask=mask[:, None], activation_checkpointing=self.activation_checkpointing)

    def decode(self, decoder_inputs, positions, cache, encoder_inputs=None, encoder_mask=None):
        """forward's causal states [B, Lq, d], incrementally: decoder_inputs [B, Lq] at positions [B, Lq] (right-padded
        prompts, then a token per row), the earlier positions' keys and values read from `cache` (a new KVCache at
        the prompts)."""
        return self.decoder.decode(self._embed(decoder_inputs, "decoder_inputs"), positions, cache)


class EncoderDecoder(TransformerModel):
    arch = ENCODER_DECODER

    def __init__(self, config: TransformerConfig, vocab_size: int, max_len: int):
        super().__init__(config, vocab_size, max_len)
        self.encoder = self._stack(config.n_layers)
        self.decoder = self._stack(
            config.n_layers if config.n_decoder_layers is None else config.n_decoder_layers,
            cross_attention=True,
            causal=True,
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

    def decode(self, decoder_inputs, positions, cache, encoder_inputs=None, encoder_mask=None):
        """forward's decoder states [B, Lq, d], incrementally, as Decoder.decode; the encoder runs at the first call
        (its output and each layer's cross-attention keys and values kept in `cache`)."""
        if cache.memory is None:
            memory = self(encoder_inputs=encoder_inputs, encoder_mask=encoder_mask)
            cache.memory = memory, self._key_padding(encoder_mask, encoder_inputs)
        return self.decoder.decode(self._embed(decoder_inputs, "decoder_inputs"), positions, cache, *cache.memory)


MODELS = {ENCODER: Encoder, DECODER: Decoder, ENCODER_DECODER: EncoderDecoder}
MODEL_NAMES = tuple(MODELS)


def build_model(name: str, vocab_size: int, max_len: int, **shape) -> TransformerModel:
    """A model by name with the TransformerConfig fields in `shape` (the library's shortcut)."""
    return TransformerConfig(name=name, **shape).build(vocab_size, max_len)
