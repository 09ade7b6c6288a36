"""T5's relative positions: the bucket of each relative distance, the learned bias per head and bucket added to
a stack's self-attention scores, and the masks folded into that bias once per stack."""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def relative_position_bucket(relative: torch.Tensor, bidirectional: bool, buckets: int, max_distance: int):
    """T5's bucket of each relative position (key - query): half the buckets exact distances, the other half
    logarithmic up to max_distance (farther: the last bucket); bidirectional stacks split them by sign, causal
    ones put every later key in bucket 0."""
    bucket = torch.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        bucket += (relative > 0).long() * buckets
        relative = relative.abs()
    else:
        relative = -relative.clamp(max=0)
    exact = buckets // 2
    scaled = torch.log(relative.float() / exact) / math.log(max_distance / exact) * (buckets - exact)
    far = (exact + scaled.long()).clamp(max=buckets - 1)
    return bucket + torch.where(relative < exact, relative, far)


def fold_mask(bias: torch.Tensor, mask: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
    """A stack's position bias [1, H, L, L] with -inf where a query may not read a key (mask, causality), once
    for all its layers; a query with no key at all keeps the bias (Attention zeroes what it reads)."""
    if is_causal:
        causal = torch.ones(bias.shape[-2:], dtype=torch.bool, device=bias.device).tril()
        mask = causal if mask is None else mask & causal
    if mask is None:
        return bias
    return bias.masked_fill(~(mask | ~mask.any(dim=-1, keepdim=True)), float("-inf"))


class RelativePositionBias(nn.Module):
    """T5's position information: a learned score per head and bucket of relative position, added to every
    layer's self-attention scores (computed once per stack)."""

    def __init__(self, n_heads: int, buckets: int, max_distance: int, bidirectional: bool):
        super().__init__()
        self.buckets, self.max_distance, self.bidirectional = buckets, max_distance, bidirectional
        self.bias = nn.Embedding(buckets, n_heads)

    def forward(self, length: int, device, queries: torch.Tensor | None = None) -> torch.Tensor:
        """[1, H, L, L] the bias of every query over `length` keys; queries (positions [B, Lq]): theirs [B, H, Lq, L]."""
        keys = torch.arange(length, device=device)
        queries = keys[None] if queries is None else queries
        bucket = relative_position_bucket(
            keys - queries[..., None], self.bidirectional, self.buckets, self.max_distance
        )
        return self.bias(bucket).permute(0, 3, 1, 2)
