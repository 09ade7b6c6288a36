"""How a model scores a sentence, for the minimal pairs (selfsup.evaluation.pairs): the rows each family's
scorer puts through the model, their batched scoring, a pair's outcome, and the n-gram references.

A scorer is a function sentences -> Rows: for every forward row its encoder and/or decoder input and its
scored (position, target) list, and the sentence it belongs to; a sentence's score is the sum of its rows'
log-probabilities (`score_rows`). Rows are batched by length, padded on the right (causal rows never see
the padding, encoder rows mask it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import torch

from selfsup.common.names import ENCODER
from selfsup.evaluation.baselines import check_stop

TIE = 1e-6  # nats: a smaller difference of two scores is float noise of batched scoring, a tie
BATCH_TOKENS = 4096  # token positions per forward (rows x longest row): on CPU the fastest of 2k-16k (benchmarks.md)


def accuracy(good: np.ndarray, bad: np.ndarray) -> np.ndarray:
    """Per pair: 1 where good scores higher, 0 where bad does, 0.5 for a tie (|difference| <= TIE)."""
    diff = np.asarray(good, dtype=np.float64) - np.asarray(bad, dtype=np.float64)
    return np.where(np.abs(diff) <= TIE, 0.5, (diff > 0).astype(np.float64))


def length_batches(lengths, batch_tokens: int = BATCH_TOKENS):
    """Indices of rows in batches of similar length, each at most batch_tokens positions (rows x longest)."""
    lengths = [int(n) for n in lengths]
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    batch: list[int] = []
    for i in order:
        if batch and (len(batch) + 1) * lengths[i] > batch_tokens:
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def _pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [N, longest], mask [N, longest]: True on the rows' own tokens), padded on the right."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    mask = np.arange(lengths.max()) < lengths[:, None]
    ids = np.full(mask.shape, pad_id, dtype=np.int64)
    ids[mask] = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
    return torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device)


def _token_logprobs(model, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) at every position of hidden [N, d] (the output head at those positions only)."""
    logits = model.head(hidden).float()
    return logits.log_softmax(-1).gather(1, targets[:, None]).squeeze(1)


@dataclass
class Rows:
    """Forward rows that score sentences: each row's inputs, its scored (position, target) list, and the
    sentence it belongs to. A sentence's score is the sum of its rows' scored log-probabilities."""

    encoder: list[list[int]] = field(default_factory=list)
    decoder: list[list[int]] = field(default_factory=list)
    scored: list[list[tuple[int, int]]] = field(default_factory=list)
    sentence: list[int] = field(default_factory=list)
    bidirectional: bool = False  # decoder rows read with bidirectional attention over their tokens (MNTP)

    def add(
        self,
        sentence: int,
        scored: list[tuple[int, int]],
        encoder: list[int] | None = None,
        decoder: list[int] | None = None,
    ) -> None:
        self.sentence.append(sentence)
        self.scored.append(scored)
        if encoder is not None:
            self.encoder.append(encoder)
        if decoder is not None:
            self.decoder.append(decoder)

    def lengths(self) -> list[int]:
        """Each row's forward length: its longer input (the one its batch is padded to)."""
        return [
            max(len(self.encoder[i]) if self.encoder else 0, len(self.decoder[i]) if self.decoder else 0)
            for i in range(len(self.sentence))
        ]


def decoder_rows(sentences: list[list[int]], vocab) -> Rows:
    """One row per sentence: </s> t0 ... t(n-2), scoring t0 ... t(n-1)."""
    rows = Rows()
    for s, ids in enumerate(sentences):
        rows.add(s, [(i, t) for i, t in enumerate(ids)], decoder=[vocab.eos_id, *ids[:-1]])
    return rows


def encoder_rows(sentences: list[list[int]], vocab) -> Rows:
    """One row per token: </s> t0 ... <mask> ... t(n-1) </s>, scoring the masked token."""
    rows = Rows()
    for s, ids in enumerate(sentences):
        text = [vocab.eos_id, *ids, vocab.eos_id]
        for i, t in enumerate(ids):
            row = list(text)
            row[i + 1] = vocab.mask_id
            rows.add(s, [(i + 1, t)], encoder=row)
    return rows


def mntp_rows(sentences: list[list[int]], vocab) -> Rows:
    """One row per token, read with bidirectional attention: </s> t0 ... <mask> ... t(n-1) </s>, scoring the
    masked token at the position before it (masked next-token prediction, GPT-BERT's masked batches)."""
    rows = Rows(bidirectional=True)
    for s, ids in enumerate(sentences):
        text = [vocab.eos_id, *ids, vocab.eos_id]
        for i, t in enumerate(ids):
            row = list(text)
            row[i + 1] = vocab.mask_id
            rows.add(s, [(i, t)], decoder=row)
    return rows


def blank_rows(sentences: list[list[int]], vocab) -> Rows:
    """One row per sentence: encoder input </s> (blank), decoder <s> t0 ... t(n-2), scoring t0 ... t(n-1)."""
    rows = Rows()
    for s, ids in enumerate(sentences):
        rows.add(s, [(i, t) for i, t in enumerate(ids)], encoder=[vocab.eos_id], decoder=[vocab.bos_id, *ids[:-1]])
    return rows


def denoise_rows(sentences: list[list[int]], vocab, span: int) -> Rows:
    """One row per span of `span` tokens (the last may be shorter): encoder </s> (tokens before the span)
    <extra_id_0> (tokens after) </s>, decoder <s> <extra_id_0> (the span but its last token), scoring the
    span's tokens, as span corruption trains the decoder."""
    rows = Rows()
    sentinel = vocab.sentinel(0)
    for s, ids in enumerate(sentences):
        for start in range(0, len(ids), span):
            part = ids[start : start + span]
            encoder = [vocab.eos_id, *ids[:start], sentinel, *ids[start + span :], vocab.eos_id]
            decoder = [vocab.bos_id, sentinel, *part[:-1]]
            rows.add(s, [(i + 1, t) for i, t in enumerate(part)], encoder=encoder, decoder=decoder)
    return rows


@torch.no_grad()
def score_rows(
    model: torch.nn.Module, rows: Rows, n_sentences: int, pad_id: int, batch_tokens: int = BATCH_TOKENS
) -> np.ndarray:
    """Each sentence's summed log-probability over its rows' scored positions (float64), in batches of
    similar length (padding on the right: causal rows never see it, encoder rows mask it)."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    totals = torch.zeros(n_sentences, dtype=torch.float64)
    length = rows.lengths()
    one_each = getattr(model, "arch", None) == ENCODER and all(len(s) == 1 for s in rows.scored)
    try:
        for batch in length_batches(length, batch_tokens):
            check_stop()
            kwargs = {}
            if rows.encoder:
                ids, mask = _pad([rows.encoder[i] for i in batch], pad_id, device)
                kwargs.update(encoder_inputs=ids, encoder_mask=mask)
            if rows.decoder:
                kwargs["decoder_inputs"], real = _pad([rows.decoder[i] for i in batch], pad_id, device)
                if rows.bidirectional:  # every real token reads every other, the padding none
                    kwargs["prefix_length"] = real.sum(1)
            r = torch.tensor([j for j, i in enumerate(batch) for _ in rows.scored[i]], device=device)
            p = torch.tensor([pos for i in batch for pos, _ in rows.scored[i]], device=device)
            t = torch.tensor([tok for i in batch for _, tok in rows.scored[i]], device=device)
            if one_each:  # an encoder's masked copies: the last block at the masked positions alone
                states = model(**kwargs, positions=p)
            else:
                states = model(**kwargs)[r, p]
            logp = _token_logprobs(model, states, t).double().cpu()
            owner = torch.tensor([rows.sentence[i] for i in batch for _ in rows.scored[i]])
            totals.index_add_(0, owner, logp)
    finally:
        model.train(was_training)
    return totals.numpy()


# ------------------------------------------------------------------------------------------ n-gram references
def unigram_logprobs(tokens, vocab_size: int, max_tokens: int = 10_000_000) -> np.ndarray:
    """log p of each token id under the add-one unigram of the first max_tokens tokens: [vocab_size]."""
    counts = np.bincount(np.asarray(tokens[:max_tokens], dtype=np.int64), minlength=vocab_size).astype(np.float64)
    return np.log((counts + 1) / (counts.sum() + vocab_size))


class NGram:
    """Unigram and bigram references counted on the training split's tokens (at most max_tokens of them):
    unigram add-one; bigram interpolated with the unigram (Jelinek-Mercer, weight LAMBDA on the bigram)."""

    LAMBDA = 0.8

    def __init__(self, tokens, vocab_size: int, max_tokens: int = 10_000_000):
        ids = np.asarray(tokens[:max_tokens], dtype=np.int64)
        self.vocab_size = vocab_size
        self.unigram = unigram_logprobs(ids, vocab_size)
        keys = ids[:-1] * vocab_size + ids[1:]
        self.keys, self.pair_counts = np.unique(keys, return_counts=True)
        self.context_counts = np.bincount(ids[:-1], minlength=vocab_size).astype(np.float64)

    def score(self, sentences: list[list[int]], eos_id: int, order: int) -> np.ndarray:
        out = np.zeros(len(sentences))
        for s, ids in enumerate(sentences):
            ids = np.asarray(ids, dtype=np.int64)
            uni = np.exp(self.unigram[ids])
            if order == 1:
                out[s] = self.unigram[ids].sum()
                continue
            prev = np.concatenate([[eos_id], ids[:-1]])
            where = np.searchsorted(self.keys, prev * self.vocab_size + ids)
            where = np.minimum(where, len(self.keys) - 1)
            found = self.keys[where] == prev * self.vocab_size + ids
            pair = np.where(found, self.pair_counts[where], 0) / np.maximum(self.context_counts[prev], 1)
            weight = np.where(self.context_counts[prev] > 0, self.LAMBDA, 0.0)
            out[s] = np.log(weight * pair + (1 - weight) * uni).sum()
        return out
