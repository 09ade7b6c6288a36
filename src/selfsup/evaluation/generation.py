"""Generation jobs' scores (downstream jobs, step 2): a (source, target) example written by a family that writes
text, its target's loss under teacher forcing, greedy decoding from the source alone, exact match and token F1.

    writing   as the family was pretrained to write text (documents joined by eos):
              decoder: `source eos target eos` in one causal stream, the loss on `target eos` (`write`);
              encoder-decoder: `source eos` into the encoder, the decoder's input `bos target`, its targets
              `target eos` (the layout of `classified`'s reading, BART's and T5's).
              An encoder does not write text: it is refused (NOT_A_WRITER), never given a made-up number.
    loss      `target_loss`: each example's summed -log p of its target tokens (eos included) and their count,
              under teacher forcing; the same target tokens for both families, so the per-token loss compares.
    finetune  `finetune_writer`: the caller's copy of a model trained on `target_loss` (per target token over the
              batch) with the classification protocol's settings (`probe.Finetune`: AdamW, warmup then cosine,
              gradients clipped to norm 1, batches drawn with replacement from `seed` and grouped by length).
    greedy    `greedy`: at most max_new_tokens argmax tokens written from the source alone (the target is never
              an input), stopped at eos; the decoder continues `source eos`, the encoder-decoder's decoder starts
              from bos after reading `source eos`; every source in one batch, a token per step through a
              key/value cache (`model.decode`).
    scores    `exact_match`, `token_f1`: SQuAD v1.1's definitions (its evaluate script's, torchmetrics' `squad`) on
              normalised text: lower case, punctuation and the articles a/an/the removed, whitespace collapsed.
"""

from __future__ import annotations

import re
import string
import sys
from collections import Counter
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from selfsup.common.names import DECODER, ENCODER_DECODER
from selfsup.evaluation.baselines import check_stop
from selfsup.evaluation.probe import Finetune, batches, optimizer, step
from selfsup.evaluation.tasks import EvalError
from selfsup.models.kv_cache import KVCache

NOT_A_WRITER = "an encoder does not write text"
WRITERS = (DECODER, ENCODER_DECODER)
IGNORE = -100


def normalize_answer(text: str) -> str:
    """SQuAD v1.1's normalisation: lower case, punctuation removed, articles removed, whitespace collapsed."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def exact_match(prediction: str, reference: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(reference))


def token_f1(prediction: str, reference: str) -> float:
    """The harmonic mean of the precision and recall of the normalised words (SQuAD v1.1's; two texts without a
    word after normalising: 1.0 when both are empty, else 0.0)."""
    predicted, referred = normalize_answer(prediction).split(), normalize_answer(reference).split()
    if not predicted or not referred:
        return float(predicted == referred)
    common = sum((Counter(predicted) & Counter(referred)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(referred)
    return 2 * precision * recall / (precision + recall)


def check_writer(arch: str) -> None:
    if arch not in WRITERS:
        raise EvalError(f"{NOT_A_WRITER}: a generation job scores decoders and encoder-decoders, not an {arch}")


@dataclass
class Written:
    """A batch of (source, target) examples as a family writes them, padded on the right; `labels` holds the
    target tokens where they are predicted and IGNORE elsewhere."""

    inputs: torch.Tensor  # decoder: the stream; encoder-decoder: the decoder's input `bos target`
    labels: torch.Tensor
    encoder_inputs: torch.Tensor | None = None
    encoder_mask: torch.Tensor | None = None

    def to(self, device) -> Written:
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Written(move(self.inputs), move(self.labels), move(self.encoder_inputs), move(self.encoder_mask))


def _padded(rows: list[list[int]], value: int) -> torch.Tensor:
    out = torch.full((len(rows), max(1, max(map(len, rows)))), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def write(
    arch: str, sources: list[list[int]], targets: list[list[int]], eos_id: int, bos_id: int, pad_id: int
) -> Written:
    """The examples (token ids, specials not included) as `arch` writes them (see the module's docstring)."""
    check_writer(arch)
    if arch == DECODER:
        streams = [[*s, eos_id, *t, eos_id] for s, t in zip(sources, targets)]
        labels = [[IGNORE] * len(s) + [*t, eos_id] for s, t in zip(sources, targets)]  # label j: token j + 1
        return Written(_padded([x[:-1] for x in streams], pad_id), _padded(labels, IGNORE))
    encoder = [[*s, eos_id] for s in sources]
    mask = _padded([[1] * len(e) for e in encoder], 0).bool()
    return Written(
        _padded([[bos_id, *t] for t in targets], pad_id),
        _padded([[*t, eos_id] for t in targets], IGNORE),
        _padded(encoder, pad_id),
        mask,
    )


def logits(model: torch.nn.Module, written: Written) -> torch.Tensor:
    """[B, L, vocab] the next-token logits at each position of `written.inputs`."""
    if model.arch == DECODER:
        return model.head(model(decoder_inputs=written.inputs))
    return model.head(
        model(encoder_inputs=written.encoder_inputs, encoder_mask=written.encoder_mask, decoder_inputs=written.inputs)
    )


def target_loss(model: torch.nn.Module, written: Written) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed -log p of each example's target tokens [B], their count [B]) under teacher forcing."""
    check_writer(model.arch)
    scores = logits(model, written).float()
    nll = F.cross_entropy(scores.transpose(1, 2), written.labels, ignore_index=IGNORE, reduction="none")
    scored = written.labels != IGNORE
    return (nll * scored).sum(1), scored.sum(1)


def rows(written: Written, pick: torch.Tensor) -> Written:
    """The examples `pick` of `written`, cut to their longest."""
    labels = written.labels[pick]
    width = max(1, int((labels != IGNORE).nonzero()[:, 1].max()) + 1) if bool((labels != IGNORE).any()) else 1
    if written.encoder_inputs is None:
        return Written(written.inputs[pick, :width], labels[:, :width])
    mask = written.encoder_mask[pick]
    source = max(1, int(mask.sum(1).max()))
    return Written(
        written.inputs[pick, :width], labels[:, :width], written.encoder_inputs[pick, :source], mask[:, :source]
    )


def lengths(written: Written) -> torch.Tensor:
    """[N] the positions each example fills: its stream or decoder input (to its last target), plus its encoder
    input."""
    scored = written.labels != IGNORE
    last = torch.where(scored, torch.arange(scored.shape[1]), -1).max(1).values + 1
    return last if written.encoder_mask is None else last + written.encoder_mask.sum(1)


def finetune_writer(model: torch.nn.Module, train: Written, settings: Finetune, seed: int) -> None:
    """Trains `model` (the caller's copy: it is changed) on the mean target-token loss of batches of `train`,
    as `settings` say, every batch drawn from `seed`."""
    check_writer(model.arch)
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    settings = settings.for_examples(len(train.inputs))
    params = list(model.parameters())
    opt, sched = optimizer(params, settings)
    model.train()
    with torch.enable_grad():
        for pick in batches(lengths(train), settings.steps, settings.batch_size, generator):
            check_stop()
            summed, count = target_loss(model, rows(train, pick).to(device))
            step(summed.sum() / count.sum().clamp(min=1), params, opt, sched)
    model.eval()


@torch.no_grad()
def greedy(
    model: torch.nn.Module,
    sources: list[list[int]],
    eos_id: int,
    bos_id: int,
    pad_id: int,
    max_new_tokens: int,
) -> list[list[int]]:
    """Each source's greedy continuation (token ids, the final eos not included), at most max_new_tokens long
    and within the model's max_len; every source in one batch."""
    check_writer(model.arch)
    if not sources:
        return []
    if model.arch == DECODER:
        return _continue(model, [[*s, eos_id] for s in sources], eos_id, pad_id, max_new_tokens)
    device = next(model.parameters()).device
    encoder = _padded([[*s, eos_id] for s in sources], pad_id).to(device)
    mask = _padded([[1] * (len(s) + 1) for s in sources], 0).bool().to(device)
    return _continue(model, [[bos_id]] * len(sources), eos_id, pad_id, max_new_tokens, encoder, mask)


def _continue(model, prompts, eos_id, pad_id, steps, encoder=None, mask=None) -> list[list[int]]:
    """At most `steps` greedy argmax tokens after each prompt (the decoder's stream or the encoder-decoder's decoder
    input), fewer where the model's max_len ends its stream first (a prompt longer than max_len writes none).

    The prompts go right-padded through one forward, then each row's next token through one forward per step at its
    own position (`model.decode`), the earlier positions' keys and values read from a KVCache; a row is done at its
    eos or its last token, the loop when every row is."""
    written: list[list[int]] = [[] for _ in prompts]
    limits = [max(0, min(steps, model.max_len - len(p) + 1)) for p in prompts]
    keep = [i for i, limit in enumerate(limits) if limit > 0]
    if not keep:
        return written
    device = next(model.parameters()).device
    ids = _padded([prompts[i] for i in keep], pad_id).to(device)
    lengths = torch.tensor([len(prompts[i]) for i in keep], device=device)
    if encoder is not None:
        encoder, mask = encoder[keep], mask[keep]
    cache, rows = KVCache(model.max_len), torch.arange(len(keep), device=device)
    positions, last = torch.arange(ids.shape[1], device=device).expand(len(keep), -1), lengths - 1
    done = [False] * len(keep)
    for n in range(max(limits)):
        tokens = model.head(model.decode(ids, positions, cache, encoder, mask)[rows, last]).argmax(-1)
        for j, (i, token) in enumerate(zip(keep, tokens.tolist())):
            if done[j]:
                continue
            if token == eos_id:
                done[j] = True
            else:
                written[i].append(token)
                done[j] = len(written[i]) == limits[i]
        if all(done):
            break
        # a done row goes on being computed (never past max_len), its tokens unread
        ids, positions = tokens[:, None], (lengths + n).clamp(max=model.max_len - 1)[:, None]
        last = torch.zeros_like(last)
    return written


# ---------------------------------------------------------------------------------------- a job's examples, scored
SCORES = ("loss", "exact_match", "token_f1")  # eval/<job>/<score>; the loss: the lower the better


@dataclass
class Prepared:
    """A generation job's examples as the run's family writes them: the training examples, the test examples (for
    the teacher-forced loss), the test sources alone (for greedy decoding) and the test targets' texts (the
    references of exact match and F1)."""

    train: Written
    test: Written
    sources: list[list[int]]
    source_texts: list[str]
    references: list[str]
    max_new_tokens: int


def prepare(
    arch: str,
    tokenizer,
    train: list[tuple[str, str]],
    test: list[tuple[str, str]],
    eos_id: int,
    bos_id: int,
    pad_id: int,
    max_length: int,
    max_new_tokens: int,
    name: str | None = None,
) -> Prepared:
    """(source, target) texts tokenised (no special tokens) and cut to fit max_length positions: the target to its
    first max_length // 2 - 1 tokens (decoder) or max_length - 1 (encoder-decoder), the source to its first tokens
    that fit beside it (decoder: `source eos target eos`) or max_length - 1 (encoder-decoder: `source eos`). Test
    targets cut are counted in a warning line naming the job `name` (None: not said)."""
    check_writer(arch)

    keep = max(1, max_length // 2 - 1) if arch == DECODER else max_length - 1  # a target's tokens kept

    def fitted(pairs):
        sources = [e.ids for e in tokenizer.encode_batch([s for s, _ in pairs], add_special_tokens=False)]
        targets = [e.ids for e in tokenizer.encode_batch([t for _, t in pairs], add_special_tokens=False)]
        cut = sum(len(t) > keep for t in targets)
        targets = [t[:keep] for t in targets]
        if arch == DECODER:
            sources = [s[: max(1, max_length - len(t) - 2)] for s, t in zip(sources, targets)]
        else:
            sources = [s[: max_length - 1] for s in sources]
        return sources, targets, cut

    train_sources, train_targets, _ = fitted(train)
    test_sources, test_targets, cut = fitted(test)
    if cut and name is not None:
        print(
            f"warning: generation job {name}: {cut} of {len(test)} test targets cut to their first {keep} tokens "
            f"(longer than {max_length} positions allow): their exact match and F1 compare what the writer can write "
            f"with the whole reference; raise eval.finetune.max_length (and data.seq_len) or shorten the targets",
            file=sys.stderr,
        )
    return Prepared(
        write(arch, train_sources, train_targets, eos_id, bos_id, pad_id),
        write(arch, test_sources, test_targets, eos_id, bos_id, pad_id),
        test_sources,
        [s for s, _ in test],
        [t for _, t in test],
        max_new_tokens,
    )


@torch.no_grad()
def score(
    model: torch.nn.Module, job: Prepared, tokenizer, eos_id: int, bos_id: int, pad_id: int, batch_size: int = 64
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """({loss: each test example's mean -log p per target token under teacher forcing, exact_match, token_f1: of
    its greedy prediction against its reference}, each [n]; the predictions' texts)."""
    check_writer(model.arch)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    n = len(job.sources)
    losses = torch.empty(n, dtype=torch.float64)
    written: list[list[int]] = []
    try:
        for i in range(0, n, batch_size):
            check_stop()
            pick = torch.arange(i, min(n, i + batch_size))
            summed, count = target_loss(model, rows(job.test, pick).to(device))
            losses[pick] = (summed / count.clamp(min=1)).double().cpu()
            written += greedy(model, job.sources[i : i + batch_size], eos_id, bos_id, pad_id, job.max_new_tokens)
    finally:
        model.train(was_training)
    return scored_writing(losses, tokenizer.decode_batch(written, skip_special_tokens=True), job.references)


def scored_writing(
    losses: torch.Tensor, predictions: list[str], references: list[str]
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """({loss, exact_match, token_f1: each [n] float64}, predictions) of written texts against their references."""
    found = {
        "loss": losses,
        "exact_match": torch.tensor([exact_match(p, r) for p, r in zip(predictions, references)]),
        "token_f1": torch.tensor([token_f1(p, r) for p, r in zip(predictions, references)]),
    }
    return {k: v.double() for k, v in found.items()}, predictions
