"""The fused output head + cross-entropy (selfsup.loss) against the plain dense computation."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from selfsup.loss import linear_cross_entropy


def dense(hidden, weight, targets, vocab_size):
    logits = hidden @ weight.t()
    logits[:, vocab_size:] = float("-inf")  # the padded ids of the vocabulary
    return F.cross_entropy(logits, targets, reduction="sum"), (logits.argmax(-1) == targets).sum()


@pytest.mark.parametrize("rows,chunk", [(100, 32), (64, 64), (7, 1000), (0, 16)])
def test_same_loss_accuracy_and_gradients_as_the_dense_head(rows, chunk):
    torch.manual_seed(rows)
    vocab, padded, d = 300, 320, 24
    weight = torch.nn.Parameter(torch.randn(padded, d))
    hidden = torch.randn(rows, d, requires_grad=True)
    targets = torch.randint(0, vocab, (rows,))
    nll, correct = dense(hidden, weight, targets, vocab)
    (nll * 0.37).backward()
    expected = weight.grad.clone(), hidden.grad.clone()
    weight.grad = hidden.grad = None

    fused, fused_correct = linear_cross_entropy(hidden, weight, targets, vocab, chunk=chunk)
    (fused * 0.37).backward()
    assert fused.item() == pytest.approx(nll.item(), rel=1e-5, abs=1e-5)
    assert fused_correct.item() == correct.item()
    torch.testing.assert_close(weight.grad, expected[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(hidden.grad, expected[1], rtol=1e-4, atol=1e-5)
    assert weight.grad[vocab:].abs().sum() == 0  # padding ids get no probability, so no gradient
    assert torch.isfinite(fused)


def test_without_gradients_gives_the_same_values():
    torch.manual_seed(0)
    weight, hidden, targets = torch.randn(64, 8), torch.randn(50, 8), torch.randint(0, 60, (50,))
    nll, correct = dense(hidden, weight, targets, 60)
    with torch.no_grad():
        fused, fused_correct = linear_cross_entropy(hidden, weight.requires_grad_(), targets, 60, chunk=16)
    assert fused.item() == pytest.approx(nll.item(), rel=1e-6) and fused_correct.item() == correct.item()
    assert not fused.requires_grad


def test_bf16_autocast_stays_close_and_gives_fp32_gradients():
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(128, 32) * 0.1)
    hidden = torch.randn(40, 32, requires_grad=True)
    targets = torch.randint(0, 128, (40,))
    nll, _ = dense(hidden, weight, targets, 128)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused, _ = linear_cross_entropy(hidden, weight, targets, 128)
    fused.backward()
    assert fused.dtype == torch.float32 and weight.grad.dtype == torch.float32
    assert fused.item() == pytest.approx(nll.item(), rel=2e-2)


class MatmulDtypes(TorchDispatchMode):
    """Records the input dtypes of every matmul that reaches the kernels (after autocast)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm):
            self.seen.append({a.dtype for a in args if isinstance(a, torch.Tensor)})
        return func(*args, **(kwargs or {}))


def test_under_autocast_every_head_matmul_runs_in_low_precision():
    # mm(out=) and in-place addmm_ are not autocast-eligible: the d weight matmul once ran in fp32 under
    # bf16-mixed (a third of the head's FLOPs off the tensor cores on a GPU)
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(128, 32) * 0.1)
    hidden = torch.randn(40, 32, requires_grad=True)
    targets = torch.randint(0, 128, (40,))
    dense(hidden, weight, targets, 128)[0].backward()
    reference = weight.grad.clone()
    weight.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16), MatmulDtypes() as mode:
        fused, _ = linear_cross_entropy(hidden, weight, targets, 128, chunk=16)  # 3 chunks
    assert len(mode.seen) == 3 * 3 and all(dtypes == {torch.bfloat16} for dtypes in mode.seen)
    fused.backward()
    assert weight.grad.dtype == torch.float32
    assert torch.allclose(weight.grad, reference, rtol=0, atol=2e-2 * reference.abs().max().item())
