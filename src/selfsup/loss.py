"""The shared cross-entropy, fused with the output head.

    sum over scored rows of  -log softmax(hidden @ weight.T)[target]

computed chunk by chunk of rows. When gradients are wanted, each chunk's gradients are computed
right away, while its logits are still in cache:

    p = softmax(logits);  p[target] -= 1;  d hidden = p @ weight;  d weight += p.T @ hidden

so the [rows, vocab] logits are never stored for backward, and the log-softmax forward and
backward passes over them are replaced by one in-place exp. Same FLOPs as the dense head (three
matmuls), 1.1-1.3x faster on CPU at the sizes of `selfsup-bench head`, and the memory of
the logits is bounded by the chunk. Values match
`F.cross_entropy(hidden @ weight.T, targets, reduction="sum")` to float rounding; rows past
`vocab_size` (the padding of the vocabulary to a multiple of 64) get no probability.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F


def stream_seed(*parts) -> int:
    """A 63-bit seed from any parts; different parts give unrelated streams (masks, exams, baselines)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def chunk_rows(vocab_size: int, device: torch.device) -> int:
    """Rows per chunk: at least 1024 (smaller chunks make the d weight matmul inefficient), and
    about 32 MB of fp32 logits on CPU, 1 GB on an accelerator (`selfsup-bench head` to compare)."""
    budget = 2**23 if device.type == "cpu" else 2**28
    return max(1024, budget // vocab_size)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, vocab_size, chunk, accuracy):
        w = weight[:vocab_size]
        # the matmul dtype: autocast's when on (bf16/fp16 tensor cores); mm(out=) and addmm_ below are
        # not autocast-eligible, so low precision is applied here by hand, else d weight runs in fp32
        device_type = hidden.device.type
        low = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
        if low is not None:  # cast once for all chunks (autocast casts a sliced weight again at every matmul)
            w = w.to(low)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.empty(weight.shape, dtype=torch.float32, device=weight.device)
        grad_weight[vocab_size if hidden.shape[0] else 0 :] = 0  # the vocabulary's padding rows (all, without rows)
        nll = torch.zeros((), dtype=torch.float32, device=hidden.device)
        correct = torch.zeros((), dtype=torch.long, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk):
            h, t = hidden[start : start + chunk], targets[start : start + chunk]
            logits = (h @ w.t()).float()  # [rows, vocab]
            rows = torch.arange(t.shape[0], device=t.device)
            if accuracy:
                correct += (logits.argmax(dim=-1) == t).sum()
            top = logits.amax(dim=-1, keepdim=True)
            picked = logits[rows, t]
            p = logits.sub_(top).exp_()  # in place: exp(logit - max)
            z = p.sum(dim=-1, keepdim=True)
            nll += (z.log() + top).squeeze(1).sub_(picked).sum()  # log-sum-exp minus the target's logit
            p.div_(z)
            p[rows, t] -= 1  # d nll / d logits
            if low is not None:  # d weight in low precision, accumulated over chunks in fp32
                p = p.to(low)
                grad_hidden[start : start + chunk] = p @ w
                part = p.t() @ h.to(low)
                if start == 0:
                    grad_weight[:vocab_size].copy_(part)
                else:
                    grad_weight[:vocab_size].add_(part)
                continue
            grad_hidden[start : start + chunk] = p.to(w.dtype) @ w
            if start == 0:  # the first chunk writes d weight, the others add to it
                torch.mm(p.t().to(h.dtype), h, out=grad_weight[:vocab_size])
            else:
                grad_weight[:vocab_size].addmm_(p.t().to(h.dtype), h)
        ctx.save_for_backward(grad_hidden, grad_weight.to(weight.dtype))
        ctx.mark_non_differentiable(correct)
        return nll, correct

    @staticmethod
    def backward(ctx, grad_nll, grad_correct):
        grad_hidden, grad_weight = ctx.saved_tensors
        return grad_hidden * grad_nll, grad_weight * grad_nll, None, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    vocab_size: int,
    accuracy: bool = True,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of -log p(target), number of rows whose argmax is the target) for hidden [N, d],
    weight [V_padded, d] (the output head), targets [N]; only the first vocab_size rows of weight
    are classes. Differentiable in hidden and weight."""
    chunk = chunk or chunk_rows(vocab_size, hidden.device)
    if torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad):
        return _LinearCrossEntropy.apply(hidden, weight, targets, vocab_size, chunk, accuracy)
    nll = torch.zeros((), dtype=torch.float32, device=hidden.device)
    correct = torch.zeros((), dtype=torch.long, device=hidden.device)
    for start in range(0, hidden.shape[0], chunk):  # no gradients: plain chunks, no [N, V] logits at once
        logits = (hidden[start : start + chunk] @ weight[:vocab_size].t()).float()
        t = targets[start : start + chunk]
        nll += F.cross_entropy(logits, t, reduction="sum")
        if accuracy:
            correct += (logits.argmax(dim=-1) == t).sum()
    return nll, correct


def token_nll(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, vocab_size: int, chunk: int | None = None
) -> torch.Tensor:
    """-log softmax(hidden @ weight.T)[target] of each row (no gradients), chunk by chunk of rows."""
    chunk = chunk or chunk_rows(vocab_size, hidden.device)
    out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
    for start in range(0, hidden.shape[0], chunk):
        logits = (hidden[start : start + chunk] @ weight[:vocab_size].t()).float()
        out[start : start + chunk] = F.cross_entropy(logits, targets[start : start + chunk], reduction="none")
    return out
