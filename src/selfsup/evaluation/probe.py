"""The downstream probe and fine-tuning: a labelled task's examples read by the model -> a classifier.

    reading   an example as its family was pretrained to read text (documents joined by eos): `A eos` or, for
              a sentence pair, `A eos B eos`, the encoder's with a leading eos in the first token's place (BERT's
              [CLS], RoBERTa's <s>): `eos A eos B eos`; longest-first truncation to max_length tokens, specials
              included, as Hugging Face tokenizers do (`encode`, with the `tokenizers` library's own truncation)
    linear    frozen features: the hidden states of the stack that reads the whole text (the encoder of an
              encoder or an encoder-decoder, the causal stack of a decoder), mean-pooled over the example's
              tokens; multinomial logistic regression on standardised features (L-BFGS; its L2 penalty `l2`, or
              the best of L2_GRID on a fifth of the training examples)
    finetune  a copy of the model plus a linear head, trained with AdamW (`Finetune`: steps, lr, batch, warmup,
              weight decay; batches drawn with replacement and grouped by length, `batches`) on a state of the
              example (`classified`). pooling=hf: the one transformers'
              *ForSequenceClassification classes read: encoder: the first token's (BertForSequenceClassification);
              decoder: the last non-padding token's (GPT2ForSequenceClassification); encoder-decoder: the
              decoder's at the final eos after reading the encoder, its input the example shifted right behind
              bos (BartForSequenceClassification). pooling=mean: the mean of the states of the stack that reads
              the whole text. pooling=auto (the default): each family's measured better one (AUTO_POOLING:
              docs/evaluation.md, "Downstream jobs"). The run's model is never changed.

Every random draw comes from generators seeded by the caller's seed, inside `torch.random.fork_rng` (the
caller's), so probing and fine-tuning leave the training RNG (and exact resume) untouched.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.data.records import check_count
from selfsup.evaluation.baselines import check_stop
from selfsup.evaluation.scoring import BATCH_TOKENS, length_batches
from selfsup.evaluation.tasks import EvalError, Examples, Text, parts

PROTOCOLS = ("linear", "finetune")
READING = "A eos B eos; encoder: eos A eos B eos; longest_first"  # how examples are written (in cache keys)
POOLINGS = ("auto", "hf", "mean")
# pooling=auto, per family: a decoder reads better from the mean of its states than from its last token's (the
# probe's task fine-tuned: +0.086 [+0.051, +0.122]); the encoder and the encoder-decoder as well from either
AUTO_POOLING = {ENCODER: "hf", DECODER: "mean", ENCODER_DECODER: "mean"}


def reader(tokenizer, family: str, eos_id: int, max_length: int):
    """A copy of `tokenizer` (the run's is not changed) that writes an example as `family` reads it: `A eos`,
    `A eos B eos` (the encoder's behind a leading eos), cut longest-first to max_length tokens."""
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing

    copy = Tokenizer.from_str(tokenizer.to_str())
    eos = copy.id_to_token(eos_id)
    lead = f"{eos} " if family == ENCODER else ""
    copy.post_processor = TemplateProcessing(
        single=f"{lead}$A {eos}", pair=f"{lead}$A {eos} $B:1 {eos}:1", special_tokens=[(eos, eos_id)]
    )
    copy.no_padding()
    copy.enable_truncation(max_length, strategy="longest_first")
    return copy


def encode(
    tokenizer, texts: list[Text], max_length: int, pad_id: int, eos_id: int, family: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [N, max_length], mask [N, max_length]) of texts (or sentence pairs) as `family` reads them (see
    `reader`), padded on the right."""
    if max_length < 5:
        raise EvalError(f"a probe's max_length={max_length} leaves no room for a sentence pair: use at least 5")
    ids = torch.full((len(texts), max_length), pad_id, dtype=torch.long)
    mask = torch.zeros(len(texts), max_length, dtype=torch.bool)
    read = reader(tokenizer, family, eos_id, max_length)
    for i, encoding in enumerate(read.encode_batch([t if isinstance(t, str) else parts(t) for t in texts])):
        row = encoding.ids[:max_length]
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = True
    return ids, mask


def hidden_states(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, L, d_model] states of the stack that reads the whole text; padding on the right."""
    if model.arch == DECODER:  # causal: the states of the text never see the padding after it
        return model(decoder_inputs=ids)
    return model(encoder_inputs=ids, encoder_mask=mask)


def pooled(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = mask.unsqueeze(-1).to(torch.float32)
    return (hidden_states(model, ids, mask).float() * weights).sum(1) / weights.sum(1).clamp(min=1)


@torch.no_grad()
def features(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, batch_tokens: int = BATCH_TOKENS
) -> torch.Tensor:
    """[N, d_model] pooled features, computed in batches of similar lengths (each cut to its longest text, at most
    batch_tokens positions: rows x longest)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    lengths = mask.sum(1).clamp(min=1)
    out = torch.empty(len(ids), model.d_model)
    try:
        for batch in length_batches(lengths.tolist(), batch_tokens):
            check_stop()
            rows = torch.tensor(batch)
            width = int(lengths[rows].max())
            out[rows] = pooled(model, ids[rows, :width].to(device), mask[rows, :width].to(device)).cpu()
        return out
    finally:
        model.train(was_training)


def classified(
    model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, pooling: str = "auto", start_id: int = 1
) -> torch.Tensor:
    """[B, d_model]: the state a classification head reads (see the module's docstring; padding on the right;
    start_id: the decoder's start token, bos)."""
    if pooling == "auto":
        pooling = AUTO_POOLING[model.arch]
    if pooling == "mean":
        return pooled(model, ids, mask)
    rows, last = torch.arange(len(ids), device=ids.device), mask.sum(1) - 1
    if model.arch == ENCODER:
        return model(encoder_inputs=ids, encoder_mask=mask)[:, 0]
    if model.arch == DECODER:
        return model(decoder_inputs=ids)[rows, last]
    shifted = torch.cat([torch.full_like(ids[:, :1], start_id), ids[:, :-1]], dim=1)
    return model(encoder_inputs=ids, encoder_mask=mask, decoder_inputs=shifted)[rows, last]


MAX_ITER = 100  # a linear probe's L-BFGS iterations per fit, at most


def _objective(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, l2: float):
    return F.cross_entropy(x @ weight.T + bias, y) + l2 * weight.pow(2).sum()


def fit_linear(
    x: torch.Tensor, y: torch.Tensor, n_classes: int, l2: float = 1e-3, max_iter: int = MAX_ITER, start=None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multinomial logistic regression: (weight [n_classes, D], bias) minimising mean cross-entropy + l2 |W|^2,
    from zeros or from `start` (a (weight, bias) of a nearby problem: the same minimum, in fewer iterations), in at
    most max_iter L-BFGS iterations (on the main job's features, 100 predict 99.5-100% of the test examples as 200
    do, the accuracy within 0.001, a weakly penalised fit in a third of the time)."""
    x, y = x.double(), y.long()
    if start is None:
        start = torch.zeros(n_classes, x.shape[1], dtype=torch.float64), torch.zeros(n_classes, dtype=torch.float64)
    weight, bias = (t.detach().clone().double().requires_grad_(True) for t in start)
    opt = torch.optim.LBFGS([weight, bias], lr=1, max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = _objective(x, y, weight, bias, l2)
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    return weight.detach(), bias.detach()


def fits_seconds(x: torch.Tensor, y: torch.Tensor, n_classes: int, l2: float | None) -> float:
    """An upper bound on linear_probe's fitting seconds on features x [N, D]: one loss-and-gradient evaluation
    timed (the fastest of 3), times the L-BFGS evaluations at the iteration cap (MAX_ITER x 1.25, torch's
    max_eval), times the fits (the penalty grid's and the final one)."""
    x, y = x.double(), y.long()
    weight = torch.zeros(n_classes, x.shape[1], dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(n_classes, dtype=torch.float64, requires_grad=True)
    seconds = []
    with torch.enable_grad():
        for _ in range(3):
            started = time.perf_counter()
            _objective(x, y, weight, bias, 1e-3).backward()
            seconds.append(time.perf_counter() - started)
    fits = 1 if l2 is not None else len(L2_GRID) + 1
    return min(seconds) * MAX_ITER * 1.25 * fits


L2_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)


def linear_probe(
    train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor, n_classes: int, l2: float | None = None
) -> torch.Tensor:
    """Predicted classes of test_x from a linear classifier fitted on standardised train_x. l2 None: the
    penalty of L2_GRID that predicts every fifth training example best when fitted on the others (the grid fitted
    from the strongest penalty down, each fit started from the one before, as scikit-learn's warm-started
    regularisation paths; the final fit from the chosen penalty's)."""
    mean, std = train_x.mean(0), train_x.std(0).clamp(min=1e-6)
    train_x, test_x = (train_x - mean) / std, (test_x - mean) / std
    start = None
    if l2 is None:
        held = torch.arange(len(train_y)) % 5 == 0
        fits, accuracy = {}, {}
        for penalty in sorted(L2_GRID, reverse=True):
            fits[penalty] = start = fit_linear(train_x[~held], train_y[~held], n_classes, penalty, start=start)
            predicted = (train_x[held].double() @ start[0].T + start[1]).argmax(1)
            accuracy[penalty] = float((predicted == train_y[held]).double().mean())
        l2 = max(L2_GRID, key=accuracy.__getitem__)  # the first of equals: the weakest penalty
        start = fits[l2]
    weight, bias = fit_linear(train_x, train_y, n_classes, l2, start=start)
    return (test_x.double() @ weight.T + bias).argmax(1)


@dataclass
class Finetune:
    """The fine-tuning protocol's settings (`eval.finetune`, FinetuneConfig): AdamW steps of `batch_size` examples
    drawn with replacement (grouped by length: `batches`), as many as `steps` says, or (steps None) `epochs`
    passes over the task's training examples, at least `min_steps` and at most `max_steps` (`for_examples`); lr
    with linear warmup over `warmup` of the steps then cosine decay to 0, `weight_decay`, gradients clipped to norm
    1; examples cut to `max_length` tokens; `seeds` fine-tuning seeds of the trained model (their spread is part of
    the margin's interval; each random-init baseline is fine-tuned once); `pooling` auto (each family's measured
    better state: AUTO_POOLING) | hf (the family's *ForSequenceClassification state) | mean (the mean of the
    states)."""

    steps: int | None = None
    epochs: float = 5.0
    min_steps: int = 50
    max_steps: int = 100
    lr: float = 1e-3
    batch_size: int = 32
    warmup: float = 0.1
    weight_decay: float = 0.01
    max_length: int = 128
    seeds: int = 2
    pooling: str = "auto"

    def check(self, key: str = "eval.finetune") -> None:
        check_count(f"{key}.steps", self.steps, optional=True)
        for name in ("min_steps", "max_steps", "batch_size", "max_length", "seeds"):
            check_count(f"{key}.{name}", getattr(self, name))
        if self.min_steps > self.max_steps:
            raise EvalError(f"{key}.min_steps={self.min_steps} is above {key}.max_steps={self.max_steps}")
        if not (isinstance(self.epochs, (int, float)) and math.isfinite(self.epochs) and self.epochs > 0):
            raise EvalError(f"{key}.epochs={self.epochs} must be a finite number > 0")
        if self.max_length < 5:
            raise EvalError(f"{key}.max_length={self.max_length} leaves no room for a sentence pair: use at least 5")
        for name, value, low in (("lr", self.lr, None), ("weight_decay", self.weight_decay, 0.0)):
            if not (
                isinstance(value, (int, float))
                and math.isfinite(value)
                and (value > 0 if low is None else value >= low)
            ):
                raise EvalError(f"{key}.{name}={value} must be a finite number " + ("> 0" if low is None else ">= 0"))
        if not (isinstance(self.warmup, (int, float)) and 0 <= self.warmup < 1):
            raise EvalError(f"{key}.warmup={self.warmup} must be a fraction of the steps in [0, 1)")
        if self.pooling not in POOLINGS:
            raise EvalError(f"{key}.pooling={self.pooling} is unknown: use one of {', '.join(POOLINGS)}")

    def for_examples(self, n: int) -> Finetune:
        """These settings with `steps` set for a task of n training examples: its own, or epochs * n / batch_size
        rounded up, within [min_steps, max_steps]."""
        if self.steps is not None:
            return self
        steps = math.ceil(self.epochs * n / self.batch_size)
        return dataclasses.replace(self, steps=min(self.max_steps, max(self.min_steps, steps)))

    def settings(self) -> list:
        """What a fine-tuned score depends on, for cache keys."""
        pooling = f"auto {sorted(AUTO_POOLING.items())}" if self.pooling == "auto" else self.pooling
        batches = f"grouped by length {GROUP}"
        return [self.steps, self.lr, self.batch_size, batches, self.warmup, self.weight_decay, self.max_length, pooling]


def optimizer(params: list, settings: Finetune):
    """(AdamW, its schedule: linear warmup over `settings.warmup` of the steps, then cosine decay to 0)."""
    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
    steps, warmup = settings.steps, int(settings.warmup * settings.steps)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, steps - warmup)))
        ),
    )
    return opt, sched


def step(loss: torch.Tensor, params: list, opt, sched) -> None:
    """One optimiser step on `loss`: gradients clipped to norm 1, then the schedule's next learning rate."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    sched.step()


GROUP = 50  # batches drawn at once and grouped by length (transformers' LengthGroupedSampler's megabatch)


def batches(lengths: torch.Tensor, steps: int, batch_size: int, generator: torch.Generator):
    """`steps` batches of example indices drawn with replacement, grouped by length: GROUP batches' worth drawn at
    once, sorted by length, cut into batches, the batches in a random order (transformers' group_by_length; the
    last group's first ones, so a short run's batches are a long run's kind). Each example is drawn uniformly as
    before; a batch cut to its longest example pads ~3% instead of ~2x."""
    size = min(batch_size, len(lengths))
    for start in range(0, steps, GROUP):
        drawn = torch.randint(len(lengths), (GROUP * size,), generator=generator)
        drawn = drawn[torch.argsort(lengths[drawn], stable=True)].view(GROUP, size)
        yield from drawn[torch.randperm(GROUP, generator=generator)[: steps - start]]


def finetune(
    model: torch.nn.Module,
    train: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    test: tuple[torch.Tensor, torch.Tensor],
    n_classes: int,
    settings: Finetune,
    seed: int,
    start_id: int = 1,
    eval_batch_size: int = 256,
) -> torch.Tensor:
    """Predicted test classes after fine-tuning `model` (the caller's copy: it is trained) plus a linear head on
    its classified state (`classified`), as `settings` say, every draw from `seed`."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    head = torch.nn.Linear(model.d_model, n_classes).to(device)
    with torch.no_grad():  # the head's initial weights from the seed too (not the global RNG)
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator) * 0.02)
        head.bias.zero_()
    ids, mask, labels = train
    settings = settings.for_examples(len(labels))
    params = list(model.parameters()) + list(head.parameters())
    opt, sched = optimizer(params, settings)
    steps = settings.steps
    model.train()
    with torch.enable_grad():
        for pick in batches(mask.sum(1), steps, settings.batch_size, generator):
            check_stop()
            width = max(1, int(mask[pick].sum(1).max()))
            state = classified(
                model, ids[pick, :width].to(device), mask[pick, :width].to(device), settings.pooling, start_id
            )
            step(F.cross_entropy(head(state), labels[pick].to(device)), params, opt, sched)
    model.eval()
    test_ids, test_mask = test
    lengths = test_mask.sum(1)
    order = torch.argsort(lengths, stable=True)
    predicted = torch.empty(len(test_ids), dtype=torch.long)
    with torch.no_grad():
        for i in range(0, len(test_ids), eval_batch_size):
            check_stop()
            rows = order[i : i + eval_batch_size]
            width = max(1, int(lengths[rows].max()))
            state = classified(
                model, test_ids[rows, :width].to(device), test_mask[rows, :width].to(device), settings.pooling, start_id
            )
            predicted[rows] = head(state).argmax(1).cpu()
    return predicted


def scores(predicted: torch.Tensor, labels: torch.Tensor, n_classes: int) -> dict[str, float]:
    """accuracy (the share right) and macro_f1 (the mean over classes of each class's F1)."""
    # torchmetrics is imported here, not at the top: ~3 s (it loads transformers), kept out of `selfsup-train`'s start
    from torchmetrics.functional.classification import multiclass_accuracy, multiclass_f1_score

    return {
        "accuracy": float(multiclass_accuracy(predicted, labels, n_classes, average="micro")),
        "macro_f1": float(multiclass_f1_score(predicted, labels, n_classes, average="macro")),
    }


def per_class(confusions: list[torch.Tensor], classes: list[str]) -> dict:
    """A task's per-class results from its confusion matrices (torchmetrics': rows the true class, columns the
    predicted; one per fine-tuning seed): the matrix summed over seeds, and each class's test examples, accuracy
    (recall: its examples predicted as it) and F1, from the summed matrix."""
    matrix = torch.stack(confusions).sum(0).double()
    right, true, predicted = matrix.diagonal(), matrix.sum(1), matrix.sum(0)
    recall = torch.where(true > 0, right / true.clamp(min=1), torch.nan)
    precision = torch.where(predicted > 0, right / predicted.clamp(min=1), 0.0)
    f1 = torch.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    rounded = lambda t: [None if v != v else round(float(v), 4) for v in t]  # noqa: E731 - NaN: no test example
    return {
        "classes": list(classes),
        "test_examples": [int(n) // len(confusions) for n in true],
        "fine_tuning_seeds": len(confusions),
        "accuracy": rounded(recall),
        "f1": rounded(f1),
        "confusion": matrix.long().tolist(),  # [true][predicted], summed over the fine-tuning seeds
    }


def confusion(predicted: torch.Tensor, labels: torch.Tensor, n_classes: int) -> torch.Tensor:
    """The confusion matrix [true, predicted] (torchmetrics)."""
    from torchmetrics.functional.classification import multiclass_confusion_matrix

    return multiclass_confusion_matrix(predicted, labels, n_classes)


def majority(train: Examples, test: Examples, n_classes: int) -> dict[str, float]:
    """Scores of always answering the most frequent training class."""
    top = max(range(n_classes), key=train.labels.count)
    return scores(torch.full((len(test),), top), torch.tensor(test.labels), n_classes)
