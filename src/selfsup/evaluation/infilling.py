"""The infilling job: given a prefix and a suffix, write the middle (decoders only, zero-shot).

Each example is a held-out text cut at word boundaries into prefix, middle (1 to middle_words words) and suffix,
the same examples for every run (drawn from a fixed seed). Each decoder reads them as it was trained to:

    psm     a run of objective=fim: `<fim_prefix> prefix <fim_suffix> suffix <fim_middle>`, then the middle
    spm     (fim_layout=spm) `<fim_prefix> <fim_suffix> suffix <fim_middle> prefix`, then the middle
    prefix  any other decoder (CLM, prefix LM): `</s> prefix`, then the middle; the suffix is not read (the
            baseline: a left-to-right model has nowhere to put it)

and is scored on the same middle tokens, as a generation job is (eval/infilling/<score>, its _se, random-init's
and the margin over it: selfsup.evaluation.job_scores), without fine-tuning:

    loss          each example's -log p of its middle's tokens under teacher forcing, per token (nats)
    exact_match   greedy decoding of as many tokens as the reference middle has (stopped at </s>), against the
    token_f1      reference: SQuAD's exact match and token F1

The random-init baselines are untrained models of the run's shape scored in the run's layout. An encoder or an
encoder-decoder is not scored (not_written). The text is read as the held-out text's is
(selfsup.evaluation.heldout: builtin held-out docstrings, text_files, hf_dataset); each document gives one example
from its first max_words words; where the FIM layout would not fit the model's positions, the prefix loses tokens
on its left and the suffix on its right (the same tokens for every layout: runs are paired over the examples).
"""

from __future__ import annotations

import copy
import hashlib
import json

import numpy as np
import torch

from selfsup.data.records import check_count
from selfsup.evaluation.baselines import check_stop
from selfsup.evaluation.generation import (
    IGNORE,
    Written,
    _continue,
    _padded,
    normalize_answer,
    scored_writing,
    target_loss,
)
from selfsup.evaluation.heldout import HeldoutText
from selfsup.evaluation.scoring import BATCH_TOKENS
from selfsup.evaluation.tasks import EvalError

INFILLING = "infilling"  # its scores: eval/infilling/<score>
NOT_INFILLED = "the infilling job scores decoders (FIM's layout, or the prefix alone)"
FIM_LAYOUTS = ("psm", "spm")


class Infilling(HeldoutText):
    """eval.infilling: `check()` reads the text and cuts the examples; `setup(vocab, tokenizer, model_length,
    infills)` tokenizes them in the run's layout (`infills`: the run was trained with FIM); `scores(model)` ->
    ({loss, exact_match, token_f1: [n] per example}, the greedy middles' texts)."""

    def __init__(
        self,
        source: str = "builtin",
        paths=(),
        text_field: str = "text",
        hf_name: str | None = None,
        hf_config: str | None = None,
        split: str = "validation",
        data_files=None,
        max_bytes: int = 131072,
        batch_tokens: int = BATCH_TOKENS,
        max_examples: int = 200,
        max_words: int = 24,
        middle_words: int = 3,
        fim_layout: str = "psm",
        examples_shown: int = 5,
    ):
        super().__init__(source, paths, text_field, hf_name, hf_config, split, data_files, max_bytes, batch_tokens)
        self.max_examples, self.max_words, self.middle_words = max_examples, max_words, middle_words
        self.fim_layout = fim_layout  # a FIM run's: psm or spm
        self.examples_shown = examples_shown  # shown with what the run and random-init write, as a job's are
        self.examples: list[tuple[str, str, str]] = []  # (prefix, middle, suffix) texts
        self.layout = ""
        self.rows: list[list[int]] = []  # each example as the run reads it, the middle last
        self.middles: list[list[int]] = []
        self.sources: list[str] = []  # `prefix … suffix`: what the shown examples show as their source
        self.references: list[str] = []

    def check(self) -> None:
        if self.fim_layout not in FIM_LAYOUTS:
            raise EvalError(
                f"eval.infilling.fim_layout={self.fim_layout} is unknown: use one of {', '.join(FIM_LAYOUTS)}"
            )
        for key in ("max_examples", "max_words", "middle_words"):
            check_count(f"eval.infilling.{key}", getattr(self, key))
        if self.max_words < 3:
            raise EvalError(
                f"eval.infilling.max_words={self.max_words} leaves no room for a prefix, a middle and a suffix: use 3 "
                f"or more"
            )
        try:
            super().check()
        except EvalError as err:
            raise EvalError(str(err).replace("eval.heldout", "eval.infilling")) from None
        self.examples = cut(self.documents, self.max_examples, self.max_words, self.middle_words)
        if not self.examples:
            raise EvalError(
                f"eval.infilling ({self.text.source}) holds no text to cut into a prefix, a middle and a suffix (3 "
                f"words or more, a middle of more than articles): point it at longer texts"
            )

    # ------------------------------------------------------------------------------ once the model exists
    def setup(self, vocab, tokenizer, model_length: int, infills: bool = False) -> None:
        if not self.examples:
            self.check()
        self.vocab, self.tokenizer = vocab, tokenizer
        self.layout = self.fim_layout if infills and vocab.fim else "prefix"
        encode = lambda texts: [e.ids for e in tokenizer.encode_batch(texts, add_special_tokens=False)]  # noqa: E731
        prefixes, middles, suffixes = (encode([e[k] for e in self.examples]) for k in range(3))
        self.rows, self.middles, kept, digest = [], [], [], hashlib.sha256()
        room = model_length + 1 - 3  # the FIM row's text: inputs are the row less its last token
        for k, (p, m, s) in enumerate(zip(prefixes, middles, suffixes)):
            if not m or len(m) > room - 2:
                continue
            while len(p) + len(m) + len(s) > room:  # the longer side loses its far end
                p, s = (p[1:], s) if len(p) >= len(s) else (p, s[:-1])
            pre, mid, suf = vocab.fim_ids if vocab.fim else (None, None, None)
            if self.layout == "psm":
                row = [pre, *p, suf, *s, mid, *m]
            elif self.layout == "spm":
                row = [pre, suf, *s, mid, *p, *m]
            else:
                row = [vocab.eos_id, *p, *m]
            self.rows.append(row)
            self.middles.append(m)
            kept.append(k)
            digest.update(json.dumps([p, m, s]).encode())
        self.references = [self.examples[k][1] for k in kept]
        self.sources = [f"{self.examples[k][0]} … {self.examples[k][2]}" for k in kept]
        self.fingerprint = digest.hexdigest()  # the same tokens in every layout: FIM and CLM runs are paired
        if not self.rows:
            raise EvalError(
                f"eval.infilling: no example's middle fits the model's {model_length} positions: lower "
                f"eval.infilling.middle_words or raise data.seq_len"
            )

    def sample(self, k: int) -> Infilling:
        """A copy holding the first k examples (the plan's warm-up)."""
        out = copy.copy(self)
        out.rows, out.middles, out.references = self.rows[:k], self.middles[:k], self.references[:k]
        return out

    # ------------------------------------------------------------------------------ scoring
    @torch.no_grad()
    def scores(self, model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], list[str]]:
        """({loss: each example's mean -log p per middle token, exact_match, token_f1: of its greedy middle}, each
        [n] float64; the greedy middles' texts). `model` is not changed."""
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        n = len(self.rows)
        loss = torch.empty(n, dtype=torch.float64)
        written: list[list[int]] = []
        size = max(1, self.batch_tokens // max(map(len, self.rows)))  # rows x longest row <= batch_tokens
        try:
            for i in range(0, n, size):
                check_stop()
                batch = range(i, min(n, i + size))
                inputs = _padded([self.rows[b][:-1] for b in batch], self.vocab.pad_id)
                labels = torch.full_like(inputs, IGNORE)
                for r, b in enumerate(batch):  # the middle is each row's end
                    m, length = len(self.middles[b]), len(self.rows[b]) - 1
                    labels[r, length - m : length] = torch.tensor(self.middles[b])
                summed, count = target_loss(model, Written(inputs.to(device), labels.to(device)))
                loss[i : i + len(batch)] = (summed / count).double().cpu()
                prompts = [self.rows[b][: len(self.rows[b]) - len(self.middles[b])] for b in batch]
                steps = max(len(self.middles[b]) for b in batch)
                for b, tokens in zip(batch, _continue(model, prompts, self.vocab.eos_id, self.vocab.pad_id, steps)):
                    written.append(tokens[: len(self.middles[b])])
        finally:
            model.train(was_training)
        return scored_writing(loss, self.tokenizer.decode_batch(written, skip_special_tokens=True), self.references)


def cut(documents: list[str], max_examples: int, max_words: int, middle_words: int) -> list[tuple[str, str, str]]:
    """(prefix, middle, suffix) of each document's first max_words words, at most max_examples: a middle of 1 to
    middle_words words (uniform, at most all but two) starting at a uniform word after the first, drawn from a
    fixed seed: the same examples for every run. A document of fewer than 3 words is skipped, and so is one whose
    middle is only articles and punctuation (SQuAD's normalisation leaves nothing of it to score)."""
    rng = np.random.default_rng(0)
    out = []
    for text in documents:
        words = text.split()[:max_words]
        if len(words) < 3:
            continue
        k = int(rng.integers(1, min(middle_words, len(words) - 2) + 1))
        a = int(rng.integers(1, len(words) - k))  # the middle's first word: a prefix and a suffix of 1 word or more
        middle = " ".join(words[a : a + k])
        if not normalize_answer(middle):  # "the", "--": nothing for exact match and F1 to compare
            continue
        out.append((" ".join(words[:a]), middle, " ".join(words[a + k :])))
        if len(out) == max_examples:
            break
    return out
