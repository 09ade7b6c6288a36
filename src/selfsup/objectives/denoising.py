"""BART denoising (Lewis et al. 2020): the encoder reads a corrupted text, the decoder writes the original.

Follows fairseq's DenoisingDataset (fairseq/data/denoising_dataset.py) at BART's pretraining settings, row by row:

1. sentence permutation (permute_sentences, default 1.0): the window splits into sentences after each full stop (the
   first of a run of them; the last sentence runs to the window's end); ceil(n * permute_sentences) of the n
   sentences, chosen at random, are shuffled among their places.
2. text infilling (mask_rate 0.3, poisson_lambda 3): a budget of ceil(mask_rate * words) words is hidden in spans
   whose lengths in words are drawn from Poisson(lambda) (fairseq's table: k = 0, 1, ... until p_k < 1e-7) until
   they sum to the budget or more, the last cut to fit. Each span of length >= 1 starts at a distinct word start
   chosen at random (spans may overlap): its first token becomes one <mask> (random_rate 0.1: a random ordinary token
   instead) and the rest of its words are deleted. A span stops at the window's end and before a special token (the
   </s> between packed documents: fairseq's spans stop at the document's end). A span of length 0 inserts one
   <mask> at a random place instead (never first or last; random_rate of them random tokens).
3. insertion (insert_rate, default 0): ceil(insert_rate * length) more tokens inserted the same way.

Words (whole_word, default true as in BART with GPT-2's BPE): a word starts at a token with the word-start marker;
with whole_word=false every token is a word. Special tokens are never hidden and never start a span.
The encoder reads the corrupted text + </s>, padded to the batch's longest row; the decoder reads <s> + the original
window and is scored on the original + </s>: every token (target = original).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.data.vocab import Vocab
from selfsup.objectives.base import (
    Objective,
    ObjectiveBatch,
    ObjectiveError,
    check_finite,
    check_probability,
    check_rate,
)
from selfsup.objectives.schedule import ScheduleConfig, make_schedule


@dataclass
class DenoisingConfig:
    """objective=bart (conf/objective/bart.yaml): the settings BartDenoising takes (fairseq's BART defaults)."""

    _target_: str = "selfsup.objectives.BartDenoising"
    name: str = "bart"
    mask_rate: float = 0.3  # fraction of words hidden by text infilling (fairseq: --mask)
    poisson_lambda: float = 3.0  # mean span length in words (fairseq: --poisson-lambda)
    random_rate: float = (
        0.1  # of the spans and inserted tokens: a random ordinary token instead of <mask> (--mask-random)
    )
    permute_sentences: float = 1.0  # fraction of sentences shuffled (fairseq: --permute-sentences)
    insert_rate: float = 0.0  # extra <mask> tokens inserted, as a fraction of the length (fairseq: --insert)
    whole_word: bool = True  # spans count whole words (fairseq: --mask-length span-poisson over word starts)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)  # mask_rate over steps (its start value)


def poisson_table(lam: float) -> np.ndarray:
    """fairseq's span-length distribution: p_k = e^-lam lam^k / k! for k = 0, 1, ... up to the first p_k < 1e-7
    (included), normalised (torch.distributions.Categorical normalises it)."""
    ps, power, factorial = [], 1.0, 1.0
    for k in range(128):
        ps.append(math.exp(-lam) * power / factorial)
        power *= lam
        factorial *= k + 1
        if ps[-1] < 1e-7:
            break
    table = np.array(ps)
    return table / table.sum()


class BartDenoising(Objective):
    """BART's denoising objective (module docstring)."""

    name = "bart"
    scheduled = "mask_rate"
    architectures = (ENCODER_DECODER,)
    refusals = {
        ENCODER: "the original text is written by a decoder; use architecture=encoder_decoder",
        DECODER: "BART needs an encoder to read the corrupted text; use architecture=encoder_decoder",
    }

    def __init__(
        self,
        vocab: Vocab,
        seq_len: int,
        architecture: str | None = None,
        *,
        mask_rate: float = DenoisingConfig.mask_rate,
        poisson_lambda: float = DenoisingConfig.poisson_lambda,
        random_rate: float = DenoisingConfig.random_rate,
        permute_sentences: float = DenoisingConfig.permute_sentences,
        insert_rate: float = DenoisingConfig.insert_rate,
        whole_word: bool = DenoisingConfig.whole_word,
        schedule=None,
        name: str | None = None,
    ):
        """seq_len: the encoder input length of a window without insertions (the window is seq_len - 1 tokens, then
        </s>); insertions make a row longer, up to model_length."""
        super().__init__(vocab, seq_len, architecture, name)
        check_rate("objective.mask_rate", mask_rate)
        self.schedule = make_schedule(mask_rate, schedule, check_rate)
        check_finite("objective.poisson_lambda", poisson_lambda)
        if poisson_lambda <= 0:
            raise ObjectiveError(
                f"objective.poisson_lambda={poisson_lambda} must be > 0: it is the mean span length in words (BART: 3)"
            )
        check_probability("objective.random_rate", random_rate)
        check_probability("objective.permute_sentences", permute_sentences)
        check_probability("objective.insert_rate", insert_rate)
        if whole_word and vocab.word_start is None:
            raise ObjectiveError(
                "objective.whole_word=true needs a vocabulary with word-start markers (a byte-level BPE "
                "tokenizer): set objective.whole_word=false"
            )
        self.mask_rate = mask_rate
        self.poisson_lambda = poisson_lambda
        self.random_rate = random_rate
        self.permute_sentences = permute_sentences
        self.insert_rate = insert_rate
        self.whole_word = whole_word
        self.spans = poisson_table(poisson_lambda)
        # the vocabulary's flags as numpy arrays, indexed by token id on every batch
        self._word_start = vocab.word_start.cpu().numpy() if whole_word and vocab.word_start is not None else None
        self._full_stop = vocab.full_stop.cpu().numpy() if vocab.full_stop is not None else None
        # the longest row: a span of >= 1 token becomes one token, a zero-length span inserts one; before the
        # budget's spans of length > 0 (at most one per word) come NegBin(budget, p_0) zero-length ones: a row with
        # more than their mean + 6 sd (below 1e-9) loses its tail; then insert_rate's tokens and </s>
        p0 = float(self.spans[0])
        budget = math.ceil((seq_len - 1) * max(self.schedule.start, self.schedule.end))
        zeros = math.ceil(budget * p0 / (1 - p0) + 6 * math.sqrt(budget * p0) / (1 - p0)) + 1
        longest = seq_len - 1 + zeros
        self._model_length = longest + math.ceil(longest * insert_rate) + 1

    @property
    def raw_length(self) -> int:
        return self.seq_len - 1

    @property
    def model_length(self) -> int:
        return self._model_length

    def __call__(self, tokens: torch.Tensor, generator: torch.Generator) -> ObjectiveBatch:
        B, L = tokens.shape
        device = tokens.device
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device).item())
        rng = np.random.default_rng(seed)
        rows = tokens.cpu().numpy()
        special = rows < self.vocab.first_ordinary
        starts = (self._word_start[rows] if self._word_start is not None else True) & ~special
        stops = self._full_stop[rows] if self._full_stop is not None else np.zeros_like(special)
        noisy = []
        for b in range(B):
            order = self.sentence_order(stops[b], rng)
            row, row_starts, row_special = rows[b][order], starts[b][order], special[b][order]
            row = self.infill(row, row_starts, row_special, rng)
            if self.insert_rate > 0:
                row = self.insert(row, math.ceil(len(row) * self.insert_rate), rng)
            noisy.append(row[: self._model_length - 1])
        length = max(len(r) for r in noisy) + 1
        inputs = np.full((B, length), self.vocab.pad_id, dtype=np.int64)
        for b, row in enumerate(noisy):
            inputs[b, : len(row)] = row
            inputs[b, len(row)] = self.vocab.eos_id
        encoder_inputs = torch.from_numpy(inputs).to(device=device, dtype=tokens.dtype)
        eos = torch.full_like(tokens[:, :1], self.vocab.eos_id)
        return ObjectiveBatch(
            targets=torch.cat([tokens, eos], dim=1),
            n_inputs=self.count_inputs(tokens),
            encoder_inputs=encoder_inputs,
            decoder_inputs=torch.cat([torch.full_like(eos, self.vocab.bos_id), tokens], dim=1),
            encoder_mask=encoder_inputs != self.vocab.pad_id,
        )

    def sentence_order(self, full_stop: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The positions of the window in sentence-permuted order (fairseq's permute_sentences)."""
        L = len(full_stop)
        first = full_stop & ~np.concatenate([[False], full_stop[:-1]])  # the first full stop of each run
        ends = np.flatnonzero(first) + 1
        if not len(ends) or ends[-1] != L:
            ends = np.append(ends, L)
        n = len(ends)
        if self.permute_sentences == 0 or n < 2:
            return np.arange(L)
        k = math.ceil(n * self.permute_sentences)
        chosen = rng.permutation(n)[:k]
        ordering = np.arange(n)
        ordering[chosen] = chosen[rng.permutation(k)]
        begins = np.concatenate([[0], ends[:-1]])
        return np.concatenate([np.arange(begins[i], ends[i]) for i in ordering])

    def infill(
        self, row: np.ndarray, word_start: np.ndarray, special: np.ndarray, rng: np.random.Generator
    ) -> np.ndarray:
        """fairseq's add_whole_word_mask with replace_length=1 and span-poisson lengths."""
        words = np.flatnonzero(word_start)
        budget = math.ceil(len(words) * self.mask_rate)
        if budget == 0:
            return row
        lengths, inserts = self.span_lengths(budget, rng)
        row = row.copy()
        keep = np.ones(len(row), dtype=bool)
        if len(lengths):
            at = words[rng.permutation(len(words))[: len(lengths)]]
            random = rng.random(len(at)) < self.random_rate
            row[at] = self.vocab.mask_id
            row[at[random]] = rng.integers(self.vocab.first_ordinary, self.vocab.size, int(random.sum()))
            # walk each span forward: a continuation token costs 0 words, a word start 1, a special ends the span
            cost = np.where(special, len(row) + 1, word_start.astype(np.int64))
            left = lengths - 1
            while len(at):
                at = at + 1
                inside = at < len(row)
                at, left = at[inside], left[inside]
                left = left - cost[at]
                going = left >= 0
                at, left = at[going], left[going]
                keep[at] = False
        row = row[keep]
        return self.insert(row, inserts, rng) if inserts else row

    def span_lengths(self, budget: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        """(the spans' lengths > 0 in draw order, the number of zero-length spans): lengths drawn from the table, in
        draws of `budget` at a time, until they sum to the budget or more; the last cut to fit (fairseq's loop)."""
        lengths = rng.choice(len(self.spans), size=budget, p=self.spans)
        while lengths.sum() < budget:
            lengths = np.concatenate([lengths, rng.choice(len(self.spans), size=budget, p=self.spans)])
        total = np.cumsum(lengths)
        last = int(np.argmax(total >= budget))
        lengths = lengths[: last + 1].copy()
        lengths[last] = budget - (total[last - 1] if last else 0)
        return lengths[lengths > 0], int((lengths == 0).sum())

    def insert(self, row: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """fairseq's add_insertion_noise: n tokens at random places of the longer row, never first or last;
        ceil(n * random_rate) of them random ordinary tokens, the rest <mask>."""
        if n == 0 or len(row) < 2:
            return row
        size = len(row) + n
        at = rng.permutation(size - 2)[:n] + 1
        noise = np.zeros(size, dtype=bool)
        noise[at] = True
        out = np.empty(size, dtype=row.dtype)
        random = math.ceil(n * self.random_rate)
        out[at[random:]] = self.vocab.mask_id
        out[at[:random]] = rng.integers(self.vocab.first_ordinary, self.vocab.size, random)
        out[~noise] = row
        return out
