"""The held-out text: a fixed text scored by the family's scorer, in bits per UTF-8 byte.

A loss per token depends on the tokenizer (a run with a larger vocabulary has fewer, harder tokens) and a
validation loss on the corpus; bits per byte does not: every run of a family reads the same bytes, whatever its
tokenizer and corpus, and pays -log2 p for them (lm-evaluation-harness's `bits_per_byte`, for decoders). Each
family scores the text as it scores the minimal pairs (selfsup.evaluation.scoring): decoders by summed
log-probability, encoders by pseudo-log-likelihood (each token masked in turn), encoder-decoders by the decoder
given a blank encoder input. The scorers differ, so the score compares runs within a family only.

    eval/heldout/bits_per_byte         -sum log2 p over the text's tokens / its UTF-8 bytes
    .../bits_per_byte_low, _high, _se  its bootstrap 95% interval and standard error over the documents
    .../unigram_bits_per_byte          the training split's unigram counts on the same tokens
    .../unigram_gap, _low, _high       bits_per_byte minus the unigram's, paired over the documents

Each document is cut into pieces of at most the model's positions less two, scored one by one (the context
starts again at each piece). The sources (eval.heldout.source): `builtin`, docstrings of the standard library
that no document of the built-in corpus holds (the probe's held-out text: never pretrained on), in their order,
up to max_bytes; `text_files` (paths: .txt / .jsonl / .parquet, text_field); `hf_dataset` (hf_name, hf_config,
split, text_field, data_files: local files for a builder such as json). Documents are read in order until max_bytes, the last one cut at a character boundary.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np
import torch

from selfsup.data.config import TextSource
from selfsup.data.hf_dataset import load_hf, quiet_datasets
from selfsup.data.records import check_count
from selfsup.data.sources import DataError, iter_text_file_documents
from selfsup.evaluation.pairs import FAMILY_ROWS
from selfsup.evaluation.scoring import BATCH_TOKENS, score_rows
from selfsup.evaluation.stats import exam_ratio, ratio_scores
from selfsup.evaluation.tasks import EvalError

SOURCES = ("builtin", "text_files", "hf_dataset")
KEY = "eval/heldout"
MIN_BUILTIN_CHARS = 200  # built-in documents: held-out docstrings of prose length


class HeldoutText:
    """eval.heldout: `check()` reads the text (one-line EvalError for a bad setting); `setup(...)` tokenizes it
    for the family; `__call__(model)` -> {metric: value}, the per-document sums kept in `last`."""

    def __init__(
        self,
        source: str = "builtin",
        paths: Sequence[str] = (),
        text_field: str = "text",
        hf_name: str | None = None,
        hf_config: str | None = None,
        split: str = "validation",
        data_files=None,
        max_bytes: int = 16384,
        batch_tokens: int = BATCH_TOKENS,
    ):
        self.text = TextSource.of(source, paths, hf_name, hf_config, data_files)  # where the text is read
        self.text_field, self.split = text_field, split
        self.max_bytes, self.batch_tokens = max_bytes, batch_tokens
        self.documents: list[str] = []
        self.pieces: list[list[int]] = []  # token ids of each scored piece
        self.owner: np.ndarray = np.zeros(0, dtype=np.int64)  # the document of each piece
        self.bytes: np.ndarray = np.zeros(0)  # UTF-8 bytes of each document
        self.unigram: np.ndarray | None = None  # per document: -sum log p under the training unigram (nats)
        self.fingerprint = ""
        self.scorer = ""
        self.last: dict[str, np.ndarray] = {}

    # ------------------------------------------------------------------------------ before training
    def check(self) -> None:
        if self.text.source not in SOURCES:
            raise EvalError(f"eval.heldout.source={self.text.source} is unknown: use one of {', '.join(SOURCES)}")
        check_count("eval.heldout.max_bytes", self.max_bytes)
        check_count("eval.heldout.batch_tokens", self.batch_tokens)
        if self.text.source == "text_files" and not self.text.paths:
            raise EvalError("eval.heldout.source=text_files needs eval.heldout.paths: a list of files or folders")
        if self.text.source == "hf_dataset" and not self.text.hf_name:
            raise EvalError("eval.heldout.source=hf_dataset needs eval.heldout.hf_name (a data set's name or folder)")
        self.documents = self.read()
        if not self.documents:
            raise EvalError(f"eval.heldout ({self.text.source}) holds no text: point it at a non-empty text")

    def read(self) -> list[str]:
        """The documents, in order, up to max_bytes of UTF-8 (the last one cut at a character boundary)."""
        out, left = [], self.max_bytes
        for text in self._texts():
            if not text or not text.strip():
                continue
            data = text.encode("utf-8")
            if len(data) >= left:  # the last document
                text = data[:left].decode("utf-8", errors="ignore")
                out += [text] if text else []
                break
            out.append(text)
            left -= len(data)
        return out

    def _texts(self):
        try:
            if self.text.source == "builtin":
                from selfsup.data.builtin import stdlib_docstrings

                yield from (t for t in stdlib_docstrings()["held_out"] if len(t) >= MIN_BUILTIN_CHARS)
            elif self.text.source == "text_files":
                yield from iter_text_file_documents(self.text.paths, self.text_field)
            else:
                where = f"eval.heldout.hf_name={self.text.hf_name}, split {self.split}"
                dataset = load_hf(
                    self.text.hf_name,
                    self.text.hf_config,
                    self.split,
                    self.text.data_files,
                    where,
                    "eval.heldout",
                    error=EvalError,
                )
                with quiet_datasets():
                    for row in dataset:
                        value = row.get(self.text_field) if isinstance(row, dict) else None
                        if not isinstance(value, str):
                            raise EvalError(
                                f"{where}: a row has no text field {self.text_field!r}: set "
                                f"eval.heldout.text_field to the column that holds the text"
                            )
                        yield value
        except DataError as err:
            raise EvalError(str(err).replace("data.", "eval.heldout.")) from None

    # ------------------------------------------------------------------------------ once the model exists
    def setup(
        self, architecture: str, vocab, tokenizer, model_length: int, train_unigram=None, scorer: str = ""
    ) -> None:
        """Tokenize the documents into pieces of at most model_length - 2 tokens for the family's scorer;
        train_unigram: log-probabilities [vocab] of the training split's tokens (the unigram reference)."""
        if not self.documents:
            self.check()
        self.vocab, self.rows, self.scorer = vocab, FAMILY_ROWS[architecture], scorer
        limit = max(1, model_length - 2)
        pieces, owner, unigram = [], [], np.zeros(len(self.documents))
        logprobs = None if train_unigram is None else np.asarray(train_unigram, dtype=np.float64)
        for d, encoding in enumerate(tokenizer.encode_batch(self.documents, add_special_tokens=False)):
            ids = encoding.ids
            for start in range(0, len(ids), limit):
                pieces.append(ids[start : start + limit])
                owner.append(d)
            if logprobs is not None:
                unigram[d] = -float(logprobs[ids].sum())
        self.pieces, self.owner = pieces, np.asarray(owner, dtype=np.int64)
        self.bytes = np.array([len(t.encode("utf-8")) for t in self.documents], dtype=np.float64)
        self.unigram = unigram if train_unigram is not None else None
        digest = hashlib.sha256(architecture.encode())
        for piece in pieces:
            digest.update(np.asarray(piece, dtype=np.int64).tobytes() + b"|")
        digest.update(self.bytes.tobytes())
        self.fingerprint = digest.hexdigest()  # the same pieces and bytes: runs are paired

    # ------------------------------------------------------------------------------ scoring
    def __call__(self, model: torch.nn.Module) -> dict[str, float]:
        rows = self.rows(self.pieces, self.vocab)
        logp = score_rows(model, rows, len(self.pieces), self.vocab.pad_id, self.batch_tokens)
        nll = np.zeros(len(self.documents))
        np.add.at(nll, self.owner, -logp)
        member = np.zeros(len(nll), dtype=np.int16)
        self.last = {"nll": nll, "count": self.bytes, "member": member}
        if self.unigram is not None:
            self.last["unigram"] = self.unigram
        return heldout_metrics(self.last)


BITS = 1 / math.log(2)  # bits per nat


def heldout_metrics(sums: dict[str, np.ndarray]) -> dict[str, float]:
    """eval/heldout/... from per-document sums: nll (nats), count (bytes), member, unigram (nats)."""
    out = {f"{KEY}/bits_per_byte": exam_ratio(sums["nll"], sums["count"], sums["member"]) * BITS}
    out.update(ratio_scores(sums, f"{KEY}/bits_per_byte", BITS))
    if "unigram" in sums:
        out[f"{KEY}/unigram_bits_per_byte"] = float(sums["unigram"].sum() / sums["count"].sum() * BITS)
    return out


def heldout_line(metrics) -> str | None:
    """`held-out text 1.234 bits/byte [1.201, 1.270]  (unigram 1.610)`: the closing line's."""
    if f"{KEY}/bits_per_byte" not in metrics:
        return None
    low, high = metrics.get(f"{KEY}/bits_per_byte_low"), metrics.get(f"{KEY}/bits_per_byte_high")
    text = f"held-out text {metrics[f'{KEY}/bits_per_byte']:.3f} bits/byte"
    if low is not None and high is not None:
        text += f" [{low:.3f}, {high:.3f}]"
    if metrics.get(f"{KEY}/unigram_bits_per_byte") is not None:
        text += f"  (unigram {metrics[f'{KEY}/unigram_bits_per_byte']:.3f})"
    return text
