"""Zero-shot minimal pairs: which of a sentence and its corrupted copy does the model score higher?

No training, no classifier: a pair counts 1 when the model gives the good sentence the higher score,
0 when the bad one, 1/2 on a tie (|difference| <= selfsup.evaluation.scoring.TIE nats). Each family gets the score BabyLM uses
for BLiMP, as `minicons` computes it:

    decoder          summed log-probability of the sentence's tokens after the document start (</s>, as
                     documents follow one in training); prefix-LM and UL2 decoders are scored as causal ones
    encoder          pseudo-log-likelihood (Salazar et al. 2020): each token masked in turn and scored,
                     the sentence between document boundaries; a sentence's masked copies go through the
                     model as rows of one batch
    encoder_decoder  the decoder's summed log-probability of the sentence given a blank encoder input
                     (minicons' Seq2SeqScorer, source_format="blank"); and beside it, `denoise`, a
                     pseudo-log-likelihood shaped like span corruption: the sentence cut into spans of
                     the run's mean span length, each span replaced by a sentinel in the encoder input and
                     written by the decoder, each token scored given the context outside its span and its
                     span's earlier tokens (with length 1: each token a one-token span)
    gpt_bert         a decoder trained in two attention modes is scored both ways: the causal summed
                     log-probability (eval/pairs) and, as `mntp`, the masked next-token pseudo-log-likelihood
                     (each token masked in turn in `</s> sentence </s>`, read with bidirectional attention and
                     scored at the position before it, as its masked batches train it: eval/pairs/mntp)

The built-in set (selfsup.evaluation.pair_sets.builtin_pairs) corrupts held-out sentences, never in the pretraining corpus, three ways:
`swap_1` (two adjacent words swapped), `replaced_1` (one word replaced), `replaced_4` (four replaced).
User sets are BLiMP's jsonl layout (`sentence_good`, `sentence_bad`, an optional group field such as
`UID`) from local files or a Hugging Face data set, read through the training data's sources.

References beside the model: unigram and bigram counts of the training split's tokens (`NGram`), and the
same scorer on randomly initialised models of the run's shape (`Evaluation` caches those per shape,
tokenizer, scorer and seed).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.data.records import EvalError, check_count
from selfsup.evaluation.baselines import boundary, cached, untrained_key
from selfsup.evaluation.pair_sets import MAX_PAIRS, MAX_WORDS, PAIR_TYPES, PairSet, PairSource, builtin_pairs
from selfsup.evaluation.scoring import (
    BATCH_TOKENS,
    NGram,
    Rows,
    accuracy,
    blank_rows,
    decoder_rows,
    denoise_rows,
    encoder_rows,
    mntp_rows,
    score_rows,
)
from selfsup.evaluation.stats import Interval, margin, standard_error
from selfsup.loss import stream_seed

SCORERS = {
    DECODER: "summed log-prob",
    ENCODER: "pseudo-log-likelihood",
    ENCODER_DECODER: "decoder log-prob, blank encoder input",
}


MNTP_OBJECTIVES = ("gpt_bert",)  # decoders also trained bidirectionally: their pairs are scored both ways
MNTP_SCORER = "MNTP pseudo-log-likelihood"


def scorer_name(architecture: str, objective: str | None = None) -> str:
    """What a printed score means, e.g. 'summed log-prob, prefix_lm scored as a causal decoder'."""
    name = SCORERS[architecture]
    if architecture == DECODER and objective in ("prefix_lm", "ul2"):
        name += f", {objective} scored as a causal decoder"
    return name


def denoise_name(span: int) -> str:
    return f"span pseudo-log-likelihood, spans of {span}" if span > 1 else "one-token-span pseudo-log-likelihood"


def pair_lines(metrics: Mapping[str, float], scorers: Mapping[str, str], width: int = 96) -> list[str]:
    """Per scorer its accuracy, the scorer's name, the margin over random-init with its 95% interval and the
    references, e.g. `pairs 0.787 (summed log-prob)  margin +0.313 [+0.291, +0.335]` then, indented when
    the whole is wider than `width`, `random-init 0.474 +- 0.007  uni/bigram 0.511/0.828`."""
    lines = []
    for prefix, scorer in scorers.items():
        if f"{prefix}/accuracy" not in metrics:
            continue
        head = f"{prefix.removeprefix('eval/').replace('/', ' ')} {metrics[f'{prefix}/accuracy']:.3f} ({scorer})"
        if f"{prefix}/margin" in metrics:
            head += "  margin " + interval(metrics, prefix)
        refs = []
        mean, sd = metrics.get(f"{prefix}/random_init_accuracy"), metrics.get(f"{prefix}/random_init_accuracy_sd")
        if mean is not None:
            refs.append(f"random-init {mean:.3f}" + (f" +- {sd:.3f}" if sd is not None else ""))
        if f"{prefix}/unigram_accuracy" in metrics and f"{prefix}/bigram_accuracy" in metrics:
            refs.append(
                f"uni/bigram {metrics[f'{prefix}/unigram_accuracy']:.3f}/{metrics[f'{prefix}/bigram_accuracy']:.3f}"
            )
        line = "  ".join([head, *refs])
        lines += [line] if len(line) <= width or not refs else [head, "  " + "  ".join(refs)]
    return lines


def interval(metrics: Mapping[str, float], key: str) -> str:
    """`+0.313 [+0.291, +0.335]`: the margin of `key` and its 95% interval."""
    return str(Interval(metrics[f"{key}/margin"], metrics[f"{key}/margin_low"], metrics[f"{key}/margin_high"]))


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    values = list(values)
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return mean, sd


# ------------------------------------------------------------------------------------------ the evaluation
class MinimalPairs:
    """The pair sets of one run and their scores: `check()` before training, `setup(...)` once the model's
    shape is known, `__call__(model)` -> {metric: value}.

        eval/pairs/accuracy, eval/pairs/<type>/accuracy           the built-in set, pooled and per type
        eval/pairs/<set>/accuracy, eval/pairs/<set>/<group>/...   each user set, pooled and per group
        eval/pairs/denoise/..., eval/pairs/mntp/...               the second scorer of an encoder-decoder, of GPT-BERT
        .../random_init_accuracy, .../random_init_accuracy_sd     the same scorer on random_init_seeds untrained
                                                                  models of the run's shape (mean, sd over seeds)
        .../margin, .../margin_low, .../margin_high               accuracy - random-init, its 95% interval
        .../unigram_accuracy, .../bigram_accuracy                 counts of the training split's tokens
        eval/pairs/denoise/...                                    encoder-decoders: the span pseudo-log-likelihood
    """

    def __init__(
        self,
        builtin: bool = True,
        types: Sequence[str] = PAIR_TYPES,
        max_pairs: int = MAX_PAIRS,
        max_words: int = MAX_WORDS,
        sets: Mapping[str, PairSource] | None = None,
        random_init_seeds: int = 3,
        denoise: bool = True,
        batch_tokens: int = BATCH_TOKENS,
        reference_tokens: int = 10_000_000,
    ):
        self.builtin, self.types, self.max_pairs, self.max_words = builtin, list(types), max_pairs, max_words
        self.sets = dict(sets or {})
        for name, source in self.sets.items():
            source.name = name
        self.random_init_seeds, self.denoise = random_init_seeds, denoise
        self.batch_tokens, self.reference_tokens = batch_tokens, reference_tokens
        self.pair_sets: list[PairSet] = []
        self.scorers: dict[str, tuple[str, callable]] = {}  # metric prefix -> (scorer's name, rows builder)
        self.built: dict[str, Rows] = {}  # metric prefix -> its scorer's rows of the sentences (`rows`)
        self.sentences: list[list[int]] = []  # unique sentences' token ids
        self.index: list[tuple[np.ndarray, np.ndarray]] = []  # per pair set: (good, bad) indices into sentences
        self.skipped = 0
        self.baselines: dict[str, float] = {}
        self.random_init: dict[str, np.ndarray] = {}  # per key: random-init outcomes [seeds, pairs]
        self.last: dict[str, np.ndarray] = {}  # per key: the last evaluated model's outcomes [pairs]

    def check(self) -> None:
        for key, value in (
            ("eval.pairs.max_pairs", self.max_pairs),
            ("eval.pairs.random_init_seeds", self.random_init_seeds),
            ("eval.pairs.batch_tokens", self.batch_tokens),
            ("eval.pairs.max_words", self.max_words),
            ("eval.pairs.reference_tokens", self.reference_tokens),
        ):
            check_count(key, value)
        if not (self.builtin or self.sets):
            raise EvalError(
                "eval.pairs has no pairs: set eval.pairs.builtin=true, add eval.pairs.sets, or turn the "
                "pairs off with eval.pairs=null"
            )
        self.pair_sets = [builtin_pairs(self.max_pairs, self.types, self.max_words)] if self.builtin else []
        self.pair_sets += [source.load() for source in self.sets.values()]

    def setup(
        self,
        architecture: str,
        vocab,
        tokenizer,
        model_length: int,
        train_tokens=None,
        objective: str | None = None,
        span: float | None = None,
        make_model=None,
        cache_dir: str | os.PathLike | None = None,
        quiet: bool = False,
    ) -> None:
        """Tokenize the sets (a pair with a sentence longer than the model's positions is left out, counted in
        `skipped` and, unless quiet, said in a warning line), count the n-gram references, choose the scorers
        of the family."""
        if not self.pair_sets:
            self.check()
        self.vocab, self.make_model = vocab, make_model
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.tokenizer_hash = hashlib.sha256(tokenizer.to_str().encode()).hexdigest()
        encoded, keeps = self.fitting(tokenizer, model_length)
        ids: dict[tuple, int] = {}
        self.sentences, self.index, self.skipped = [], [], 0
        for ps, keep in zip(self.pair_sets, keeps):
            self.skipped += len(ps) - len(keep)
            pair_index = []
            for which in (ps.good, ps.bad):
                column = []
                for i in keep:
                    key = tuple(encoded[which[i]])
                    if key not in ids:
                        ids[key] = len(self.sentences)
                        self.sentences.append(list(key))
                    column.append(ids[key])
                pair_index.append(np.asarray(column, dtype=np.int64))
            ps.kept = keep
            self.index.append((pair_index[0], pair_index[1]))
        if self.skipped and not quiet:
            total = sum(len(ps) for ps in self.pair_sets)
            print(
                f"warning: eval.pairs: {self.skipped} of {total} pairs left out: longer than {model_length - 2} "
                f"tokens (raise data.seq_len)",
                file=sys.stderr,
            )
        self.built = {}
        self.scorers = {"eval/pairs": (scorer_name(architecture, objective), FAMILY_ROWS[architecture])}
        if architecture == ENCODER_DECODER and self.denoise:
            k = max(1, int(round(span if span is not None else 3.0)))
            self.scorers["eval/pairs/denoise"] = (denoise_name(k), lambda s, v, k=k: denoise_rows(s, v, k))
        if architecture == DECODER and objective in MNTP_OBJECTIVES:  # scored both ways: causal and MNTP
            self.scorers["eval/pairs/mntp"] = (MNTP_SCORER, mntp_rows)
        self.references = {}
        if train_tokens is not None and len(train_tokens) > 1:
            counts = NGram(train_tokens, vocab.size, self.reference_tokens)
            self.references = {
                order: counts.score(self.sentences, vocab.eos_id, n) for order, n in (("unigram", 1), ("bigram", 2))
            }

    def fitting(self, tokenizer, model_length: int) -> tuple[dict[str, list[int]], list[list[int]]]:
        """Each sentence's token ids, and per pair set the pairs whose two sentences fit the model's positions;
        EvalError when no pair does (prepare checks it before anything is written)."""
        if not self.pair_sets:
            self.check()
        texts = list(dict.fromkeys(t for ps in self.pair_sets for t in ps.good + ps.bad))
        encoded = {t: e.ids for t, e in zip(texts, tokenizer.encode_batch(texts, add_special_tokens=False))}
        fits = {t: 0 < len(ids) <= model_length - 2 for t, ids in encoded.items()}
        keeps = [[i for i in range(len(ps)) if fits[ps.good[i]] and fits[ps.bad[i]]] for ps in self.pair_sets]
        if not any(keeps):
            raise EvalError(
                f"eval.pairs: every pair has a sentence longer than the model's {model_length - 2} "
                f"positions: raise data.seq_len or use shorter sentences"
            )
        return encoded, keeps

    def prefixes(self) -> dict[str, str]:
        """{metric prefix of a set under a scorer: the scorer's name}: eval/pairs (the built-in set),
        eval/pairs/<set>, eval/pairs/denoise, eval/pairs/denoise/<set>."""
        return {
            prefix if ps.name == "builtin" else f"{prefix}/{ps.name}": name
            for prefix, (name, _) in self.scorers.items()
            for ps in self.pair_sets
        }

    # -------------------------------------------------------------------------------------- scoring
    def rows(self, prefix: str) -> Rows:
        """The forward rows of the scorer of `prefix` over the sentences, built once (the trained model, each
        random-init seed and the plan's warm-up read the same)."""
        if prefix not in self.built:
            self.built[prefix] = self.scorers[prefix][1](self.sentences, self.vocab)
        return self.built[prefix]

    def scores(self, model: torch.nn.Module, prefix: str) -> np.ndarray:
        """Every unique sentence's score under the scorer of `prefix`."""
        return score_rows(model, self.rows(prefix), len(self.sentences), self.vocab.pad_id, self.batch_tokens)

    def outcomes(self, prefix: str, scores: np.ndarray) -> dict[str, np.ndarray]:
        """{prefix[/set][/group]: per-pair outcomes (1, 0, 0.5 a tie)} of sentence scores, pooled and per group."""
        out = {}
        for ps, (good, bad) in zip(self.pair_sets, self.index):
            if not len(good):
                continue
            outcome = accuracy(scores[good], scores[bad])
            base = prefix if ps.name == "builtin" else f"{prefix}/{ps.name}"
            out[base] = outcome
            if ps.groups:
                groups = np.asarray(ps.groups, dtype=object)[ps.kept]
                out.update({f"{base}/{group}": outcome[groups == group] for group in dict.fromkeys(groups)})
        return out

    def fingerprints(self) -> dict[str, str]:
        """{key: a hash of the texts of its pairs, in outcome order} for every key of `outcomes` under each scorer:
        two runs' outcomes of a key are paired when their hashes agree."""
        out = {}
        for ps in self.pair_sets:
            kept = [[ps.good[i], ps.bad[i], ps.groups[i] if ps.groups else ""] for i in ps.kept]
            out[ps.name] = {
                "": kept,
                **{group: [k for k in kept if k[2] == group] for group in dict.fromkeys(ps.groups)},
            }
        hashes = {}
        for prefix in self.scorers:
            for ps in self.pair_sets:
                base = prefix if ps.name == "builtin" else f"{prefix}/{ps.name}"
                for group, pairs in out[ps.name].items():
                    if pairs:
                        key = f"{base}/{group}" if group else base
                        hashes[key] = hashlib.sha256(json.dumps(pairs).encode()).hexdigest()
        return hashes

    def __call__(self, model: torch.nn.Module) -> dict[str, float]:
        """The accuracies of `model`, their margins over random-init with a paired bootstrap 95% interval
        (selfsup.evaluation.stats: pairs and random-init seeds resampled), and the references."""
        if not self.baselines:
            self.baselines = self.random_init_and_references(model)
        out = {}
        for prefix in self.scorers:
            boundary(f"the pairs by {self.scorers[prefix][0]}")
            for key, outcome in self.outcomes(prefix, self.scores(model, prefix)).items():
                self.last[key] = outcome
                out[f"{key}/accuracy"] = float(outcome.mean())
                out[f"{key}/accuracy_se"] = standard_error(outcome)
                if key in self.random_init:
                    m = margin(outcome, self.random_init[key])
                    out.update({f"{key}/margin": m.value, f"{key}/margin_low": m.low, f"{key}/margin_high": m.high})
                    out[f"{key}/margin_examples"] = float(len(outcome))
        out.update(self.baselines)
        return out

    def random_init_and_references(self, model: torch.nn.Module) -> dict[str, float]:
        """The references of every key: unigram and bigram accuracies, and the random-init accuracy (mean and
        sd over seeds), whose per-seed outcomes [seeds, pairs] are kept in self.random_init."""
        out = {}
        for order, scores in self.references.items():
            out.update(
                {f"{key}/{order}_accuracy": float(o.mean()) for key, o in self.outcomes("eval/pairs", scores).items()}
            )
        if self.make_model is None:
            return out
        device = next(model.parameters()).device
        for prefix in self.scorers:
            runs = []
            for seed in range(self.random_init_seeds):
                boundary(f"the pairs' random-init seed {seed + 1} of {self.random_init_seeds}")
                runs.append(self.outcomes(prefix, self.random_init_scores(prefix, seed, device)))
            for key in runs[0]:
                self.random_init[key] = np.stack([r[key] for r in runs])
                mean, sd = mean_sd([float(r[key].mean()) for r in runs])
                out[f"{key}/random_init_accuracy"] = mean
                out[f"{key}/random_init_accuracy_sd"] = sd
        return out

    def random_init_entry(self, prefix: str, seed: int, device) -> tuple[torch.nn.Module, Path | None]:
        """The untrained model of `seed` and its cache entry's path (None: no cache_dir)."""
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(stream_seed("pairs-random-init", seed))
            fresh = self.make_model().to(device)
        if self.cache_dir is None:
            return fresh, None
        key = untrained_key(
            fresh,
            scorer=self.scorers[prefix][0],
            tokenizer=self.tokenizer_hash,
            sentences=hashlib.sha256(json.dumps(self.sentences).encode()).hexdigest(),
        )
        return fresh, self.cache_dir / "pairs-random-init" / f"{key}.npy"

    def random_init_scores(self, prefix: str, seed: int, device) -> np.ndarray:
        """The sentence scores of an untrained model of the run's shape, initialised from `seed` (the same
        for every run of that shape): read from <cache_dir>/pairs-random-init/ when an earlier run computed
        them (selfsup.evaluation.baselines)."""
        fresh, path = self.random_init_entry(prefix, seed, device)

        def read(p: Path):
            scores = np.load(p)
            return scores if scores.shape == (len(self.sentences),) else None

        return cached(path, lambda: self.scores(fresh, prefix), read, lambda scores, f: np.save(f, scores))


FAMILY_ROWS = {DECODER: decoder_rows, ENCODER: encoder_rows, ENCODER_DECODER: blank_rows}
