"""Incremental decoding's key/value cache (transformers' past_key_values, as one plain object): a model's `decode`
reads and writes it, once over the prompts, then once per written token; training's forward keeps none."""

from __future__ import annotations

import torch


class KVCache:
    """The keys and values [B, H, T, d_head] of every attention layer of one causal stack, keyed by the layer.

    Self-attention's are written at the positions of the tokens being decoded (`step`: each row's own) into buffers
    of `length` positions (the model's max_len), so a right-padded prompt's padding is overwritten by the row's
    next tokens and never read; cross-attention's are the encoder output's, projected at the first step and kept.
    `memory`: an encoder-decoder's encoder output and key padding (the encoder runs once)."""

    def __init__(self, length: int):
        self.length = length
        self.kv: dict[torch.nn.Module, tuple[torch.Tensor, torch.Tensor]] = {}
        self.memory: tuple[torch.Tensor, torch.Tensor | None] | None = None
        self.positions: torch.Tensor | None = None
        self.used = 0  # the buffers' positions up to the last one written

    def step(self, positions: torch.Tensor) -> torch.Tensor:
        """Sets the positions [B, Lq] of the tokens decoded now; the mask [B, 1, Lq, used] of the keys each reads:
        its own position and the earlier ones."""
        self.positions, self.used = positions, int(positions.max()) + 1
        return (torch.arange(self.used, device=positions.device) <= positions[..., None])[:, None]

    def update(self, layer: torch.nn.Module, k: torch.Tensor, v: torch.Tensor, cross: bool = False):
        """The keys and values [B, H, T, d_head] `layer` attends to: a self-attention layer's k, v [B, H, Lq, d_head]
        written at the step's positions, then all it holds up to `used`; a cross-attention layer's first ones."""
        if cross:
            return self.kv.setdefault(layer, (k, v))
        if layer not in self.kv:
            shape = (*k.shape[:2], self.length, k.shape[-1])
            self.kv[layer] = k.new_zeros(shape), v.new_zeros(shape)
        keys, values = self.kv[layer]
        rows = torch.arange(len(k), device=k.device)[:, None]
        keys[rows, :, self.positions] = k.transpose(1, 2)  # [B, Lq, H, d_head]: the indexed dimensions first
        values[rows, :, self.positions] = v.transpose(1, 2)
        return keys[:, :, : self.used], values[:, :, : self.used]
