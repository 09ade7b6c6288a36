"""The fixed exam: every run of an architecture family scored on the same panel of tasks, whatever it trained on.

    encoder          MLM (80% <mask> / 10% random / 10% unchanged) at mask rates 0.10, 0.15, 0.25, 0.40
    encoder_decoder  span corruption at mean span 3 and noise densities 0.10, 0.15, 0.25, 0.50, and at noise
                     density 0.15 and mean spans 2, 3, 5, 10 (7 members: (0.15, 3) is in both)
    decoder          next-token loss (CLM), the one member

(eval.fixed.mask_rates, .span_rates, .span_lengths: the axes of the T5 paper's ablations and of the shipped
sweeps, so that no swept setting is favoured by being the exam's own). Its loss, eval/fixed/loss, is the
unweighted mean over the members of each member's token-weighted loss (each setting counts equally), each
member's beside it as eval/fixed/<member>/loss (member names: rate_15 for MLM at 15%, rate_15_span_3 for span
corruption at 15%, mean span 3; a '.' of a number is written 'p': rate_12p5; no per-member keys with one member).
Span corruption's members score the text of the spans only (kinds first and later): the sentinels and the closing
eos (kind sentinel) are reported beside, out of the loss (UNSCORED: their number is the exam's, not the run's).
Its split by kind of target (eval/fixed/<kind>/...) pools the members weighted as the loss is, each member's
scored targets weighing 1 / (members x their number): the scored kinds' fractions sum to 1 and their losses
weighted by their fractions sum to eval/fixed/loss exactly (a token-pooled split would sum to the token-weighted
panel loss).

Each member reads the start of the validation split (eval.fixed.max_tokens shared evenly by the members: the
exam's cost does not grow with the panel or the corpus), cut into windows of its own raw length (span
corruption's: at most as many spans as the panel's member with the fewest, `same_sentinels`), in batches of
EXAM_BATCH, with masks drawn from generators seeded by (family, member, batch index) only: two runs with the
same data and data.seq_len see the same masked windows, whatever their mask rate, span length or seed. The
family's canonical member (MLM at 15%; span corruption at 0.15, mean span 3; CLM) keeps the seeds of the single
exam the panel replaced: the predictions table (FixedExam.examples) shows it at data.seq_len. The loss is what makes mask-rate
and span-length sweeps comparable within a family. Across families the exams differ (see the downstream probe
for that axis).
"""

from __future__ import annotations

import hashlib
import math
import textwrap
from dataclasses import fields, replace

import numpy as np
import torch

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.evaluation.baselines import check_stop
from selfsup.evaluation.tasks import EvalError
from selfsup.loss import stream_seed, token_nll
from selfsup.objectives import Objective, ObjectiveError, build_objective
from selfsup.objectives.span import span_counts

MLM = {"mask_token_prob": 0.8, "random_token_prob": 0.1}
EXAMS = {
    ENCODER: ("mlm", {"mask_rate": 0.15, **MLM}),  # the canonical member of each family
    ENCODER_DECODER: ("span_corruption", {"mask_rate": 0.15, "mean_span_length": 3.0}),
    DECODER: ("clm", {}),
}
# the default panel (FixedExamConfig's): encoder: MLM at each mask rate; encoder_decoder: span corruption at each
# noise density with the canonical mean span 3, and at each mean span with the canonical noise density 0.15
MASK_RATES = (0.10, 0.15, 0.25, 0.40)
SPAN_RATES = (0.10, 0.15, 0.25, 0.50)
SPAN_LENGTHS = (2.0, 3.0, 5.0, 10.0)
PANEL_SETTINGS = ("mask_rates", "span_rates", "span_lengths")  # eval.fixed's keys of the panel
EXAM_BATCH = 32  # fixed, so that the masks do not depend on data.batch_size
# the kinds of target each exam's loss is split into (eval/fixed/<kind>/...):
#   encoder: what the encoder read there: <mask>, a random token, the token itself unchanged
#   encoder_decoder: the first token of a span (only the encoder's context predicts it), a later token of a
#                    span, a sentinel or the closing eos (the targets' structure)
KINDS = {
    ENCODER: ("masked", "random", "unchanged"),
    ENCODER_DECODER: ("first", "later", "sentinel"),
    DECODER: ("next",),
}
NO_UNIGRAM = {"sentinel"}  # never in the text: a unigram of the text says nothing of them
# kinds reported (eval/fixed/<kind>/loss) but left out of the exam's loss: the targets' structure. A member's
# windows close after fewer spans than most runs trained with (same_sentinels), so its sentinels and eos would
# favour runs trained with few spans; the text a span hides is scored alike whatever the run's setting
UNSCORED = {"sentinel"}


def _number(x: float) -> str:
    return f"{round(x, 6):g}".replace(".", "p")  # a metric-name-safe number: 12.5 -> 12p5


def member_name(architecture: str, params: dict) -> str:
    """rate_15 (MLM at 15%), rate_15_span_3 (span corruption at 0.15, mean span 3), clm."""
    if architecture == DECODER:
        return "clm"
    name = f"rate_{_number(100 * params['mask_rate'])}"
    return name + (f"_span_{_number(params['mean_span_length'])}" if architecture == ENCODER_DECODER else "")


def panel(architecture: str, mask_rates=MASK_RATES, span_rates=SPAN_RATES, span_lengths=SPAN_LENGTHS) -> dict:
    """{member name: (objective name, its settings)} of a family's panel, in the settings' order, each once."""
    name, canonical = EXAMS[architecture]
    if architecture == ENCODER:
        settings = [{"mask_rate": r, **MLM} for r in mask_rates]
    elif architecture == ENCODER_DECODER:
        settings = [{**canonical, "mask_rate": r} for r in span_rates] + [
            {**canonical, "mean_span_length": float(s)} for s in span_lengths
        ]
    else:
        settings = [canonical]
    out = {}
    for params in settings:
        out.setdefault(member_name(architecture, params), (name, params))
    return out


def check_panel(mask_rates=MASK_RATES, span_rates=SPAN_RATES, span_lengths=SPAN_LENGTHS) -> None:
    """EvalError (one line) for a panel setting that is empty, a rate outside (0, 1) or a span below 1."""
    for key, values in (("mask_rates", mask_rates), ("span_rates", span_rates), ("span_lengths", span_lengths)):
        values = list(values)
        if not values:
            raise EvalError(
                f"eval.fixed.{key}=[] is empty: the exam's panel needs at least one value; "
                f"eval.fixed=null turns the exam off"
            )
        for v in values:
            if key != "span_lengths" and not 0 < v < 1:
                raise EvalError(f"eval.fixed.{key}={values}: {v} is not a rate in (0, 1) (the share of tokens hidden)")
            if key == "span_lengths" and not (math.isfinite(v) and v >= 1):
                raise EvalError(
                    f"eval.fixed.{key}={values}: {v} is not a mean span length >= 1 (a span holds at least one token)"
                )


def exam_objective(architecture: str, vocab, seq_len: int) -> Objective:
    """The family's canonical member."""
    name, params = EXAMS[architecture]
    return build_objective(name, vocab, seq_len, architecture, **params)


def exam_seed(architecture: str, batch: int, member: str | None = None) -> int:
    """The seed of a member's batch; the canonical member's (member None) are the former single exam's."""
    return (
        stream_seed("fixed-exam", architecture, batch)
        if member is None
        else stream_seed("fixed-exam", architecture, member, batch)
    )


def _member_objective(
    name: str, objective: str, params: dict, vocab, seq_len: int, architecture: str, named: dict
) -> Objective:
    """A member's objective at data.seq_len or, where its spans need more sentinels than the vocabulary has
    (a high noise density on long windows), at the longest halved window length that fits."""
    length, first = seq_len, None
    while True:
        try:
            return build_objective(objective, vocab, length, architecture, **params, **named)
        except ObjectiveError as err:
            first = first or err
            if length // 2 < 8:
                raise EvalError(
                    f"the fixed exam's panel member {name} (eval.fixed) cannot be built for this run: {first}"
                ) from None
            length //= 2


def same_sentinels(
    built: dict[str, tuple[Objective, dict]], vocab, architecture: str, named: dict
) -> dict[str, Objective]:
    """Span corruption's members cut to windows of at most as many noise spans as the member with the fewest has
    at data.seq_len (each the longest raw window that does; the others unchanged). A run trained at a setting
    meets only the sentinels of its own number of spans (T5 numbers a window's spans from <extra_id_0> on, and
    that number is fixed by the window's length, rate and mean span), so members with more spans would score
    sentinels that runs with long spans or low rates never saw: every run of the panel's range sees all of
    these."""
    if architecture != ENCODER_DECODER:
        return {name: objective for name, (objective, _) in built.items()}
    spans = {
        name: span_counts(o.raw_length, p["mask_rate"], p["mean_span_length"])[1] for name, (o, p) in built.items()
    }
    fewest, out = min(spans.values()), {}
    for name, (objective, params) in built.items():
        raw = objective.raw_length
        while span_counts(raw, params["mask_rate"], params["mean_span_length"])[1] > fewest:
            raw -= 1
        out[name] = (
            objective
            if raw == objective.raw_length
            else build_objective(
                "span_corruption", vocab, objective.model_length, architecture, raw_length=raw, **params, **named
            )
        )
    return out


class FixedExam:
    """The exam of one family over the start of a flat array of validation token ids: each member of the panel
    reads the first max_tokens // members tokens (max_tokens None: all of them). mask_rates, span_rates,
    span_lengths: the panel (see `panel`)."""

    def __init__(
        self,
        architecture: str,
        vocab,
        seq_len: int,
        val_tokens: np.ndarray,
        max_tokens: int | None = None,
        unigram: np.ndarray | None = None,
        mask_rates=MASK_RATES,
        span_rates=SPAN_RATES,
        span_lengths=SPAN_LENGTHS,
    ):
        self.architecture = architecture
        self.unigram = unigram  # log-probabilities [vocab] of the training split's tokens, or None
        members = panel(architecture, mask_rates, span_rates, span_lengths)
        budget = len(val_tokens) if max_tokens is None else min(len(val_tokens), max_tokens // len(members))
        named = {"setting": "eval.fixed"} if architecture == ENCODER_DECODER else {}  # in its errors
        built = same_sentinels(
            {
                name: (_member_objective(name, objective, params, vocab, seq_len, architecture, named), params)
                for name, (objective, params) in members.items()
            },
            vocab,
            architecture,
            named,
        )

        def windows(objective: Objective) -> torch.Tensor:
            length = objective.raw_length
            return torch.from_numpy(
                np.asarray(val_tokens[: budget // length * length], dtype=np.int64).reshape(-1, length)
            )

        self.members = {name: (objective, windows(objective)) for name, objective in built.items()}
        self.canonical = member_name(architecture, EXAMS[architecture][1])
        objective = exam_objective(architecture, vocab, seq_len)  # the predictions table's: at data.seq_len
        self.examples_member = (objective, windows(objective))
        self.windows_last: dict[str, np.ndarray] = {}  # sums' per-window arrays of the last model scored
        digest = hashlib.sha256(f"{architecture}|{list(self.members)}".encode())
        for name, (o, w) in self.members.items():
            digest.update(f"{name}|{o.raw_length}|{tuple(w.shape)}".encode())
            digest.update(w.numpy().tobytes())
        self.fingerprint = digest.hexdigest()  # the exam's windows and members: runs with the same one are paired

    @property
    def objective(self) -> Objective:
        """The canonical member's objective (the predictions table's)."""
        return self.examples_member[0]

    @property
    def windows(self) -> torch.Tensor:
        """The canonical member's windows."""
        return self.examples_member[1]

    @property
    def model_length(self) -> int:
        return max(o.model_length for o, _ in [*self.members.values(), self.examples_member])

    def batches(self, device: torch.device | str = "cpu", member: str | None = None):
        """A member's ObjectiveBatches (None: the canonical member's), the same for every run of the family."""
        objective, windows = self.examples_member if member is None else self.members[member]
        legacy = member is None or member == self.canonical
        for i, start in enumerate(range(0, len(windows), EXAM_BATCH)):
            tokens = windows[start : start + EXAM_BATCH].to(device)
            seed = exam_seed(self.architecture, i, None if legacy else member)
            yield objective(tokens, torch.Generator(device=device).manual_seed(seed))

    def kinds(self, batch) -> torch.Tensor:
        """The kind of each scored target of a batch (in the order of batch.targets[batch.scored]), as an
        index into KINDS[family]."""
        scored, targets, vocab = batch.scored, batch.targets, self.objective.vocab
        if self.architecture == ENCODER:  # what the encoder read at the target's position
            read = batch.encoder_inputs[scored]
            return torch.where(read == vocab.mask_id, 0, torch.where(read == targets[scored], 2, 1))
        if self.architecture == ENCODER_DECODER:
            sentinel = (targets >= vocab.sentinel_start) & (targets < vocab.sentinel_end)
            last = torch.arange(targets.shape[1], device=targets.device) == scored.sum(1, keepdim=True) - 1
            after = torch.cat([torch.zeros_like(sentinel[:, :1]), sentinel[:, :-1]], dim=1)
            kind = torch.where(sentinel | last, 2, torch.where(after, 0, 1))  # the eos ends each row's targets
            return kind[scored]
        return torch.zeros(int(scored.sum()), dtype=torch.long, device=targets.device)

    @torch.no_grad()
    def sums(self, model: torch.nn.Module) -> dict[str, dict[str, list[float]]]:
        """{member: {kind: [sum of -log p, number of targets, sum of -log p under `unigram`]}} over every scored
        target of each member (the unigram sum is 0 where the exam has no unigram reference). Per window, over
        the targets in the loss, as self.windows_last: nll, count, unigram (with a unigram) and member (the
        member's index in self.members), [windows] each, in the members' order."""
        device = next(model.parameters()).device
        unigram = None if self.unigram is None else torch.as_tensor(self.unigram, device=device)
        names = KINDS[self.architecture]
        in_loss = torch.tensor([name not in UNSCORED for name in names], device=device)
        out, windows = {}, {"nll": [], "count": [], "unigram": [], "member": []}
        for index, member in enumerate(self.members):
            out[member] = found = {name: [0.0, 0, 0.0] for name in names}
            for batch in self.batches(device, member):
                check_stop()
                hidden = model(
                    encoder_inputs=batch.encoder_inputs,
                    decoder_inputs=batch.decoder_inputs,
                    encoder_mask=batch.encoder_mask,
                    prefix_length=batch.prefix_length,
                )
                targets = batch.targets[batch.scored]
                nll = token_nll(hidden[batch.scored], model.lm_head.weight, targets, model.vocab_size)
                kind = self.kinds(batch)
                for code, name in enumerate(found):
                    chosen = kind == code
                    found[name][0] += float(nll[chosen].sum(dtype=torch.float64))
                    found[name][1] += int(chosen.sum())
                    if unigram is not None:
                        found[name][2] += float(-unigram[targets[chosen]].sum())
                # per window (row), the targets the loss counts: the paired bootstrap's units (exam_loss)
                counted, rows = in_loss[kind], batch.scored.nonzero()[:, 0]
                size = len(batch.targets)
                windows["nll"].append(per_row(rows[counted], nll[counted], size))
                windows["count"].append(per_row(rows[counted], torch.ones_like(nll[counted]), size))
                if unigram is not None:
                    windows["unigram"].append(per_row(rows[counted], -unigram[targets[counted]], size))
                windows["member"].append(np.full(size, index, dtype=np.int16))
        self.windows_last = {k: np.concatenate(v) for k, v in windows.items() if v}
        return out

    def metrics(self, model: torch.nn.Module) -> dict[str, float]:
        """eval/fixed/loss: the unweighted mean over the panel's members of each member's token-weighted loss over
        its scored targets, those of every kind but UNSCORED (a member without such targets, e.g. no window in
        max_tokens, is left out; none: 0), /perplexity its exp; with more than one member,
        eval/fixed/<member>/loss. Per scored kind, pooled over the members with each member's scored targets
        weighing 1 / (members x its number of scored targets), as in the loss: eval/fixed/<kind>/loss, /fraction
        (its share of the scored targets) and, for text targets, /unigram_loss (the training split's unigram on
        the same targets, weighed alike). So the fractions sum to 1 and the scored kinds' losses weighted by their
        fractions sum to eval/fixed/loss exactly (up to rounding). An UNSCORED kind has its loss only, the mean
        over the members of each one's loss on it."""
        names = KINDS[self.architecture]
        scored = [name for name in names if name not in UNSCORED]
        sums = self.sums(model)
        counts = {m: sum(kinds[k][1] for k in scored) for m, kinds in sums.items()}
        found = {m: kinds for m, kinds in sums.items() if counts[m]}
        losses = {m: sum(kinds[k][0] for k in scored) / counts[m] for m, kinds in found.items()}
        loss = sum(losses.values()) / len(losses) if losses else 0.0
        out = {"eval/fixed/loss": loss, "eval/fixed/perplexity": math.exp(min(loss, 80.0))}
        if len(self.members) > 1:
            out.update({f"eval/fixed/{m}/loss": value for m, value in losses.items()})
        for name in scored:
            fraction, nll, unigram = (
                sum(kinds[name][i] / counts[m] for m, kinds in found.items()) / len(found) for i in (1, 0, 2)
            )
            if not fraction:
                continue
            if len(names) > 1:
                out.update({f"eval/fixed/{name}/loss": nll / fraction, f"eval/fixed/{name}/fraction": fraction})
            if self.unigram is not None and name not in NO_UNIGRAM:
                out[f"eval/fixed/{name}/unigram_loss" if len(names) > 1 else "eval/fixed/unigram_loss"] = (
                    unigram / fraction
                )
        for name in (name for name in names if name in UNSCORED):  # in KINDS' order
            members = [kinds[name][0] / kinds[name][1] for kinds in found.values() if kinds[name][1]]
            if members:
                out[f"eval/fixed/{name}/loss"] = sum(members) / len(members)
        return out

    def loss(self, model: torch.nn.Module) -> float:
        """eval/fixed/loss: the mean over the panel's members of each one's token-weighted cross-entropy."""
        return self.metrics(model)["eval/fixed/loss"]

    @torch.no_grad()
    def examples(self, model: torch.nn.Module, tokenizer, n: int = 4, max_targets: int = 24) -> list[list]:
        """The first n windows of the canonical member with what the model predicts at their scored positions (the
        argmax of the same teacher-forced step the loss scores): rows of [example, input, target, prediction,
        accuracy]. input is what the model reads (the encoder's input, else the decoder's), target and prediction
        the first max_targets scored tokens, separated by '|'. The same windows and masks for every run of the
        family."""
        batch = next(self.batches(next(model.parameters()).device), None)
        if batch is None:  # no exam window (eval.fixed.max_tokens below one window)
            return []
        batch = replace(
            batch,
            **{
                f.name: getattr(batch, f.name)[:n]
                for f in fields(batch)  # the shown rows only
                if f.name != "n_inputs" and getattr(batch, f.name) is not None
            },
        )
        hidden = model(
            encoder_inputs=batch.encoder_inputs,
            decoder_inputs=batch.decoder_inputs,
            encoder_mask=batch.encoder_mask,
            prefix_length=batch.prefix_length,
        )
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
            rows.append(
                [
                    i,
                    tokenizer.decode(text, skip_special_tokens=False),
                    "|".join(shown),
                    "|".join(guessed),
                    round(accuracy, 4),
                ]
            )
        return rows


def per_row(rows: torch.Tensor, values: torch.Tensor, size: int) -> np.ndarray:
    """[size] float64: the sum of `values` at each row index."""
    summed = torch.zeros(size, dtype=torch.float64, device=values.device)
    return summed.index_add_(0, rows, values.to(torch.float64)).cpu().numpy()


def _token(tokenizer, token_id: int) -> str:
    """One token's text, with line breaks and tabs visible."""
    return tokenizer.decode([token_id], skip_special_tokens=False).replace("\n", "\\n").replace("\t", "\\t")


def member_label(name: str) -> str:
    """rate_15 -> 'rate 15%', rate_15_span_3 -> 'rate 15% span 3' (the closing line's)."""
    rate, _, span = name.removeprefix("rate_").partition("_span_")
    return f"rate {rate.replace('p', '.')}%" + (f" span {span.replace('p', '.')}" if span else "")


def panel_lines(metrics, width: int = 96) -> list[str]:
    """`fixed exam panel (nats): rate 10% 6.01, rate 15% 5.98, ...`: each member's loss (their mean is
    eval/fixed/loss), in lines of at most `width`; [] without per-member losses."""
    parts = [
        f"{member_label(key.split('/')[2])} {value:.2f}"
        for key, value in metrics.items()
        if key.startswith("eval/fixed/rate_") and key.endswith("/loss") and key.count("/") == 3
    ]
    lines = ["fixed exam panel (nats):"] if parts else []
    for i, part in enumerate(parts):  # a member's label and loss never broken across lines
        part += "," if i < len(parts) - 1 else ""
        if len(lines[-1]) + 1 + len(part) > width:
            lines.append(" ")
        lines[-1] += " " + part
    return lines


def split_lines(metrics, width: int = 96) -> list[str]:
    """The exam's panel (panel_lines), then `fixed exam by target (nats): masked 6.52 (unigram 6.63, 80%)
    random ...`: the exam's loss per kind of target beside the unigram on the same targets, and its share, in
    lines of at most `width`; [] without a panel or a split."""
    parts = []
    for kinds in KINDS.values():
        for kind in kinds:
            if f"eval/fixed/{kind}/loss" not in metrics:
                continue
            unigram = metrics.get(f"eval/fixed/{kind}/unigram_loss")
            fraction = metrics.get(f"eval/fixed/{kind}/fraction")
            parts.append(
                f"{kind} {metrics[f'eval/fixed/{kind}/loss']:.2f} ("
                + (f"unigram {unigram:.2f}, " if unigram is not None else "")
                + (f"{fraction:.0%})" if fraction is not None else "not in the loss)")
            )
    if not parts and "eval/fixed/unigram_loss" in metrics:
        parts.append(f"next {metrics['eval/fixed/loss']:.2f} (unigram {metrics['eval/fixed/unigram_loss']:.2f})")
    by_target = (
        textwrap.wrap("fixed exam by target (nats): " + ";  ".join(parts), width, subsequent_indent="  ")
        if parts
        else []
    )
    return panel_lines(metrics, width) + by_target
