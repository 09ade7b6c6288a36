"""The downstream probe: features of a frozen model (or a short fine-tune of a copy) -> a linear classifier.

    features  the hidden states of the stack that reads the whole text (the encoder of an encoder or an
              encoder-decoder, the causal stack of a decoder), mean-pooled over the text's tokens
    linear    multinomial logistic regression on standardised features (L-BFGS; its L2 penalty `l2`, or the
              best of L2_GRID on a fifth of the training examples), the model frozen
    finetune  `finetune_steps` AdamW steps on a copy of the model plus a linear head (the run's model is
              never changed)

Every random draw comes from generators seeded by the probe's `seed`, inside `torch.random.fork_rng`,
so probing leaves the training RNG (and exact resume) untouched.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from selfsup.evaluation.baselines import check_stop
from selfsup.evaluation.tasks import Examples

PROTOCOLS = ("linear", "finetune")


def encode(tokenizer, texts: list[str], max_length: int, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [N, max_length], mask [N, max_length]) of texts cut to max_length tokens, padded on the right."""
    ids = torch.full((len(texts), max_length), pad_id, dtype=torch.long)
    mask = torch.zeros(len(texts), max_length, dtype=torch.bool)
    for i, encoding in enumerate(tokenizer.encode_batch(texts, add_special_tokens=False)):
        row = encoding.ids[:max_length] or [pad_id]
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = True
    return ids, mask


def hidden_states(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, L, d_model] states of the stack that reads the whole text; padding on the right."""
    if model.arch == "decoder":  # causal: the states of the text never see the padding after it
        return model(decoder_inputs=ids)
    return model(encoder_inputs=ids, encoder_mask=mask)


def pooled(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = mask.unsqueeze(-1).to(torch.float32)
    return (hidden_states(model, ids, mask).float() * weights).sum(1) / weights.sum(1).clamp(min=1)


@torch.no_grad()
def features(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, batch_size: int = 256) -> torch.Tensor:
    """[N, d_model] pooled features, computed in batches of similar lengths (each cut to its longest text)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    lengths = mask.sum(1)
    order = torch.argsort(lengths, stable=True)
    out = torch.empty(len(ids), model.d_model)
    try:
        for i in range(0, len(ids), batch_size):
            check_stop()
            rows = order[i : i + batch_size]
            width = max(1, int(lengths[rows].max()))
            out[rows] = pooled(model, ids[rows, :width].to(device), mask[rows, :width].to(device)).cpu()
        return out
    finally:
        model.train(was_training)


def fit_linear(
    x: torch.Tensor, y: torch.Tensor, n_classes: int, l2: float = 1e-3, max_iter: int = 200
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multinomial logistic regression: (weight [n_classes, D], bias) minimising mean cross-entropy + l2 |W|^2."""
    x, y = x.double(), y.long()
    weight = torch.zeros(n_classes, x.shape[1], dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(n_classes, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([weight, bias], lr=1, max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(x @ weight.T + bias, y) + l2 * weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    return weight.detach(), bias.detach()


L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)


def linear_probe(
    train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor, n_classes: int, l2: float | None = None
) -> torch.Tensor:
    """Predicted classes of test_x from a linear classifier fitted on standardised train_x. l2 None: the
    penalty of L2_GRID that predicts every fifth training example best when fitted on the others."""
    mean, std = train_x.mean(0), train_x.std(0).clamp(min=1e-6)
    train_x, test_x = (train_x - mean) / std, (test_x - mean) / std
    if l2 is None:
        held = torch.arange(len(train_y)) % 5 == 0

        def held_out_accuracy(penalty: float) -> float:
            weight, bias = fit_linear(train_x[~held], train_y[~held], n_classes, penalty)
            return float(((train_x[held].double() @ weight.T + bias).argmax(1) == train_y[held]).double().mean())

        l2 = max(L2_GRID, key=held_out_accuracy)  # the first of equals: the weakest penalty
    weight, bias = fit_linear(train_x, train_y, n_classes, l2)
    return (test_x.double() @ weight.T + bias).argmax(1)


def finetune(
    model: torch.nn.Module,
    train: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    n_classes: int,
    steps: int,
    lr: float,
    batch_size: int,
    seed: int,
    eval_batch_size: int = 256,
) -> torch.Tensor:
    """Predicted test classes after `steps` AdamW steps (linear warmup over 10%, cosine decay) of `model`
    (the caller's copy: it is trained) plus a linear head on its pooled features."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(model.d_model, n_classes).to(device)
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    warmup = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, steps - warmup)))
        ),
    )
    ids, mask, labels = train
    model.train()
    with torch.enable_grad():
        for _ in range(steps):
            check_stop()
            pick = torch.randint(len(labels), (min(batch_size, len(labels)),), generator=generator)
            logits = head(pooled(model, ids[pick].to(device), mask[pick].to(device)))
            loss = F.cross_entropy(logits, labels[pick].to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
    model.eval()
    with torch.no_grad():
        x = features(model, *test, batch_size=eval_batch_size)
        return head(x.to(device)).argmax(1).cpu()


def scores(predicted: torch.Tensor, labels: torch.Tensor, n_classes: int) -> dict[str, float]:
    """accuracy (the share right) and macro_f1 (the mean over classes of each class's F1)."""
    # torchmetrics is imported here, not at the top: ~3 s (it loads transformers), kept out of `selfsup-train`'s start
    from torchmetrics.functional.classification import multiclass_accuracy, multiclass_f1_score

    return {
        "accuracy": float(multiclass_accuracy(predicted, labels, n_classes, average="micro")),
        "macro_f1": float(multiclass_f1_score(predicted, labels, n_classes, average="macro")),
    }


def majority(train: Examples, test: Examples, n_classes: int) -> dict[str, float]:
    """Scores of always answering the most frequent training class."""
    top = max(range(n_classes), key=train.labels.count)
    return scores(torch.full((len(test),), top), torch.tensor(test.labels), n_classes)
