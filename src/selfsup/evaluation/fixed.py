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

from dataclasses import fields, replace

import numpy as np
import torch

from selfsup.loss import stream_seed
from selfsup.objectives import Objective, build_objective

EXAMS = {"encoder": ("mlm", {"mask_rate": 0.15, "mask_token_prob": 0.8, "random_token_prob": 0.1}),
         "encoder_decoder": ("span_corruption", {"mask_rate": 0.15, "mean_span_length": 3.0}),
         "decoder": ("clm", {})}
EXAM_BATCH = 32  # fixed, so that the masks do not depend on data.batch_size


def exam_objective(architecture: str, vocab, seq_len: int) -> Objective:
    name, params = EXAMS[architecture]
    return build_objective(name, vocab, seq_len, architecture, **params)


def exam_seed(architecture: str, batch: int) -> int:
    return stream_seed("fixed-exam", architecture, batch)


class FixedExam:
    """The exam of one family over the first max_tokens of a flat array of validation token ids (None:
    all of them)."""

    def __init__(self, architecture: str, vocab, seq_len: int, val_tokens: np.ndarray,
                 max_tokens: int | None = None):
        self.architecture = architecture
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

    @torch.no_grad()
    def loss(self, model: torch.nn.Module) -> float:
        """Token-weighted mean cross-entropy of `model` over every scored position of the exam."""
        from selfsup.module import cross_entropy_sums
        device = next(model.parameters()).device
        total, count = 0.0, 0
        for batch in self.batches(device):
            nll, n, _ = cross_entropy_sums(model, batch, accuracy=False)
            total, count = total + float(nll), count + int(n)
        return total / max(count, 1)

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
