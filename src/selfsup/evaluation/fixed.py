"""The fixed exam: every run of an architecture family scored on the same task, whatever it trained on.

    encoder          MLM at 15% (80% <mask> / 10% random / 10% unchanged)
    encoder_decoder  span corruption at noise density 0.15, mean span length 3
    decoder          next-token loss (CLM)

over the start of the validation split (at most max_tokens tokens: the exam's cost does not grow with
the corpus), cut into windows of the exam's own length, in batches of EXAM_BATCH, with
masks drawn from generators seeded by (family, batch index) only: two runs with the same data and
data.seq_len see the same masked windows, whatever their mask rate, span length or seed. Its loss is
what makes mask-rate and span-length sweeps comparable within a family. Across families the exams
differ (see the downstream probe for that axis).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import fields, replace

import numpy as np
import torch

from selfsup.loss import stream_seed, token_nll
from selfsup.objectives import Objective, build_objective

EXAMS = {"encoder": ("mlm", {"mask_rate": 0.15, "mask_token_prob": 0.8, "random_token_prob": 0.1}),
         "encoder_decoder": ("span_corruption", {"mask_rate": 0.15, "mean_span_length": 3.0}),
         "decoder": ("clm", {})}
EXAM_BATCH = 32  # fixed, so that the masks do not depend on data.batch_size
# the kinds of target each exam's loss is split into (eval/fixed/<kind>/...):
#   encoder: what the encoder read there: <mask>, a random token, the token itself unchanged
#   encoder_decoder: the first token of a span (only the encoder's context predicts it), a later token of a
#                    span, a sentinel or the closing eos (the targets' structure)
KINDS = {"encoder": ("masked", "random", "unchanged"), "encoder_decoder": ("first", "later", "sentinel"),
         "decoder": ("next",)}
NO_UNIGRAM = {"sentinel"}  # never in the text: a unigram of the text says nothing of them


def exam_objective(architecture: str, vocab, seq_len: int) -> Objective:
    name, params = EXAMS[architecture]
    return build_objective(name, vocab, seq_len, architecture, **params)


def exam_seed(architecture: str, batch: int) -> int:
    return stream_seed("fixed-exam", architecture, batch)


class FixedExam:
    """The exam of one family over the first max_tokens of a flat array of validation token ids (None:
    all of them)."""

    def __init__(self, architecture: str, vocab, seq_len: int, val_tokens: np.ndarray,
                 max_tokens: int | None = None, unigram: np.ndarray | None = None):
        self.architecture = architecture
        self.unigram = unigram  # log-probabilities [vocab] of the training split's tokens, or None
        self.objective = exam_objective(architecture, vocab, seq_len)
        length = self.objective.raw_length
        n = min(len(val_tokens), max_tokens if max_tokens is not None else len(val_tokens)) // length
        self.windows = torch.from_numpy(np.asarray(val_tokens[:n * length], dtype=np.int64).reshape(n, length))

    @property
    def model_length(self) -> int:
        return self.objective.model_length

    def batches(self, device: torch.device | str = "cpu"):
        """The exam's ObjectiveBatches, the same for every run of the family."""
        for i, start in enumerate(range(0, len(self.windows), EXAM_BATCH)):
            tokens = self.windows[start:start + EXAM_BATCH].to(device)
            generator = torch.Generator(device=device).manual_seed(exam_seed(self.architecture, i))
            yield self.objective(tokens, generator)

    def kinds(self, batch) -> torch.Tensor:
        """The kind of each scored target of a batch (in the order of batch.targets[batch.scored]), as an
        index into KINDS[family]."""
        scored, targets, vocab = batch.scored, batch.targets, self.objective.vocab
        if self.architecture == "encoder":  # what the encoder read at the target's position
            read = batch.encoder_inputs[scored]
            return torch.where(read == vocab.mask_id, 0, torch.where(read == targets[scored], 2, 1))
        if self.architecture == "encoder_decoder":
            sentinel = (targets >= vocab.sentinel_start) & (targets < vocab.first_ordinary)
            last = torch.arange(targets.shape[1], device=targets.device) == scored.sum(1, keepdim=True) - 1
            after = torch.cat([torch.zeros_like(sentinel[:, :1]), sentinel[:, :-1]], dim=1)
            kind = torch.where(sentinel | last, 2, torch.where(after, 0, 1))  # the eos ends each row's targets
            return kind[scored]
        return torch.zeros(int(scored.sum()), dtype=torch.long, device=targets.device)

    @torch.no_grad()
    def sums(self, model: torch.nn.Module) -> dict[str, list[float]]:
        """{kind: [sum of -log p, number of targets, sum of -log p under `unigram`]} over every scored target
        of the exam (the unigram sum is 0 where the exam has no unigram reference)."""
        device = next(model.parameters()).device
        names = KINDS[self.architecture]
        out = {name: [0.0, 0, 0.0] for name in names}
        unigram = None if self.unigram is None else torch.as_tensor(self.unigram, device=device)
        for batch in self.batches(device):
            hidden = model(encoder_inputs=batch.encoder_inputs, decoder_inputs=batch.decoder_inputs,
                           encoder_mask=batch.encoder_mask, prefix_length=batch.prefix_length)
            targets = batch.targets[batch.scored]
            nll = token_nll(hidden[batch.scored], model.lm_head.weight, targets, model.vocab_size)
            kind = self.kinds(batch)
            for code, name in enumerate(names):
                chosen = kind == code
                out[name][0] += float(nll[chosen].sum(dtype=torch.float64))
                out[name][1] += int(chosen.sum())
                if unigram is not None:
                    out[name][2] += float(-unigram[targets[chosen]].sum())
        return out

    def metrics(self, model: torch.nn.Module) -> dict[str, float]:
        """eval/fixed/loss and /perplexity (token-weighted over every scored target), and per kind of target
        eval/fixed/<kind>/loss, /fraction (its share of the targets) and, for text targets, /unigram_loss (the
        training split's unigram on the same targets). The kinds' losses weighted by their fractions sum to
        the loss."""
        found = self.sums(model)
        count = sum(n for _, n, _ in found.values())
        loss = sum(nll for nll, _, _ in found.values()) / max(count, 1)
        out = {"eval/fixed/loss": loss, "eval/fixed/perplexity": math.exp(min(loss, 80.0))}
        for name, (nll, n, unigram) in found.items():
            if n and len(found) > 1:
                out.update({f"eval/fixed/{name}/loss": nll / n, f"eval/fixed/{name}/fraction": n / count})
            if n and self.unigram is not None and name not in NO_UNIGRAM:
                out[f"eval/fixed/{name}/unigram_loss" if len(found) > 1 else "eval/fixed/unigram_loss"] = unigram / n
        return out

    def loss(self, model: torch.nn.Module) -> float:
        """Token-weighted mean cross-entropy of `model` over every scored position of the exam."""
        return self.metrics(model)["eval/fixed/loss"]

    @torch.no_grad()
    def examples(self, model: torch.nn.Module, tokenizer, n: int = 4, max_targets: int = 24) -> list[list]:
        """The first n windows of the exam with what the model predicts at their scored positions (the argmax of
        the same teacher-forced step the loss scores): rows of [example, input, target, prediction, accuracy].
        input is what the model reads (the encoder's input, else the decoder's), target and prediction the first
        max_targets scored tokens, separated by '|'. The same windows and masks for every run of the family."""
        batch = next(self.batches(next(model.parameters()).device), None)
        if batch is None:  # no exam window (eval.fixed.max_tokens below one window)
            return []
        batch = replace(batch, **{f.name: getattr(batch, f.name)[:n] for f in fields(batch)  # the shown rows only
                                  if f.name != "n_inputs" and getattr(batch, f.name) is not None})
        hidden = model(encoder_inputs=batch.encoder_inputs, decoder_inputs=batch.decoder_inputs,
                       encoder_mask=batch.encoder_mask, prefix_length=batch.prefix_length)
        predicted = model.head(hidden).argmax(-1)
        inputs = batch.encoder_inputs if batch.encoder_inputs is not None else batch.decoder_inputs
        rows = []
        for i in range(min(n, len(inputs))):
            scored = batch.scored[i]
            targets, guesses = batch.targets[i][scored].tolist(), predicted[i][scored].tolist()
            shown = [_token(tokenizer, t) for t in targets[:max_targets]]
            guessed = [_token(tokenizer, t) for t in guesses[:max_targets]]
            accuracy = sum(t == g for t, g in zip(targets, guesses)) / max(len(targets), 1)
            text = [t for t in inputs[i].tolist() if t != self.objective.vocab.pad_id]
            rows.append([i, tokenizer.decode(text, skip_special_tokens=False), "|".join(shown),
                         "|".join(guessed), round(accuracy, 4)])
        return rows


def _token(tokenizer, token_id: int) -> str:
    """One token's text, with line breaks and tabs visible."""
    return tokenizer.decode([token_id], skip_special_tokens=False).replace("\n", "\\n").replace("\t", "\\t")


def split_lines(metrics, width: int = 96) -> list[str]:
    """`fixed exam by target (nats): masked 6.52 (unigram 6.63, 80%)  random ...`: the exam's loss per kind of
    target beside the unigram on the same targets, and its share, in lines of at most `width`; [] without a
    split."""
    parts = []
    for kinds in KINDS.values():
        for kind in kinds:
            if f"eval/fixed/{kind}/loss" not in metrics:
                continue
            unigram = metrics.get(f"eval/fixed/{kind}/unigram_loss")
            parts.append(f"{kind} {metrics[f'eval/fixed/{kind}/loss']:.2f} ("
                         + (f"unigram {unigram:.2f}, " if unigram is not None else "")
                         + f"{metrics[f'eval/fixed/{kind}/fraction']:.0%})")
    if not parts and "eval/fixed/unigram_loss" in metrics:
        parts.append(f"next {metrics['eval/fixed/loss']:.2f} (unigram {metrics['eval/fixed/unigram_loss']:.2f})")
    if not parts:
        return []
    return textwrap.wrap("fixed exam by target (nats): " + ";  ".join(parts), width, subsequent_indent="  ")
