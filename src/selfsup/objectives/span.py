"""Span corruption (T5): contiguous spans become sentinels; the decoder writes the spans.

Follows T5's `random_spans_noise_mask` exactly: noise tokens = round(L * rate) clamped to
[1, L-1]; spans = max(1, round(noise / mean_span_length)); noise and non-noise lengths are
independent random compositions into that many positive parts, interleaved starting with
non-noise, so the last noise span ends the sequence. For fixed settings every batch has the same
shapes: inputs = non-noise + spans + 1 (eos), targets = noise + spans + 1 (eos).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.data.vocab import Vocab
from selfsup.objectives.base import Objective, ObjectiveBatch, ObjectiveError, check_finite, check_rate
from selfsup.objectives.schedule import ScheduleConfig, make_schedule


def span_counts(raw_length: int, mask_rate: float, mean_span_length: float) -> tuple[int, int]:
    """(noise tokens, noise spans) for a raw window, as T5 computes them."""
    noise = min(max(int(round(raw_length * mask_rate)), 1), raw_length - 1)
    spans = max(1, int(round(noise / mean_span_length)))
    return noise, spans


def span_lengths(raw_length: int, mask_rate: float, mean_span_length: float) -> tuple[int, int]:
    """(encoder input length, target length) produced from a raw window of raw_length tokens."""
    noise, spans = span_counts(raw_length, mask_rate, mean_span_length)
    return raw_length - noise + spans + 1, noise + spans + 1


def raw_length_for(inputs_length: int, mask_rate: float, mean_span_length: float) -> tuple[int, int]:
    """Longest raw window whose corrupted encoder input fits inputs_length: (raw length, targets length).

    T5's `random_spans_helper`: 512 inputs at rate 0.15, mean 3 -> 568 raw tokens, 114 targets.
    """
    raw = max(inputs_length - 1, 2)
    while span_lengths(raw + 1, mask_rate, mean_span_length)[0] <= inputs_length:
        raw += 1
    targets = span_lengths(raw, mask_rate, mean_span_length)[1]
    if mask_rate == 0.5 and targets > inputs_length:  # T5's hack: keep targets <= inputs at 50%
        raw -= 1
        targets = span_lengths(raw, mask_rate, mean_span_length)[1]
    return raw, targets


def random_compositions(
    total: int, parts: int, batch: int, generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """[batch, parts] positive integers summing to total, uniformly over compositions."""
    if parts == 1:
        return torch.full((batch, 1), total, dtype=torch.long, device=device)
    # choose parts-1 distinct cut points among the total-1 gaps between items: the indices of the
    # k largest of i.i.d. uniforms are a uniformly random k-subset (topk beats a full argsort)
    cuts = torch.rand(batch, total - 1, generator=generator, device=device).topk(parts - 1, dim=1).indices
    edges = torch.cat(
        [
            torch.zeros(batch, 1, dtype=torch.long, device=device),
            cuts.sort(dim=1).values + 1,
            torch.full((batch, 1), total, dtype=torch.long, device=device),
        ],
        dim=1,
    )
    return edges.diff(dim=1)


@dataclass
class SpanCorruptionConfig:
    """objective=span_corruption (conf/objective/span_corruption.yaml)."""

    _target_: str = "selfsup.objectives.SpanCorruption"
    name: str = "span_corruption"
    mask_rate: float = 0.15  # noise density: fraction of the window's tokens in spans
    mean_span_length: float = 3.0
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)  # mask_rate over steps (its start value)


class SpanCorruption(Objective):
    """T5's span corruption (module docstring). With objective.schedule the noise density moves over training steps
    (selfsup.objectives.schedule): the window is the one whose encoder input fits seq_len at the lower end, and
    each step's batches have that step's encoder and target lengths (the model's positions cover both ends)."""

    name = "span_corruption"
    scheduled = "mask_rate"
    architectures = (ENCODER_DECODER,)
    refusals = {
        ENCODER: "the spans are written by a decoder; use architecture=encoder_decoder",
        DECODER: "span corruption needs an encoder to read the corrupted input; use architecture=encoder_decoder",
    }

    def __init__(
        self,
        vocab: Vocab,
        seq_len: int,
        architecture: str | None = None,
        *,
        mask_rate: float = SpanCorruptionConfig.mask_rate,
        mean_span_length: float = SpanCorruptionConfig.mean_span_length,
        raw_length: int | None = None,
        schedule=None,
        setting: str = "objective",
        name: str | None = None,
    ):
        """seq_len is the encoder input length; raw_length overrides the window (then seq_len is derived).
        setting: the config node named in errors (UL2: objective.denoisers[i])."""
        super().__init__(vocab, seq_len, architecture, name)
        check_rate(f"{setting}.mask_rate", mask_rate)
        check_finite(f"{setting}.mean_span_length", mean_span_length)
        if mean_span_length < 1:
            raise ObjectiveError(
                f"{setting}.mean_span_length={mean_span_length} is below 1: "
                f"a span holds at least one token, use a value >= 1 (T5: 3)"
            )
        self.schedule = make_schedule(mask_rate, schedule, check_rate)
        self.mask_rate = mask_rate
        self.mean_span_length = mean_span_length
        low, high = sorted((self.schedule.start, self.schedule.end))
        self._raw = raw_length if raw_length is not None else raw_length_for(seq_len, low, mean_span_length)[0]
        if self._raw < 2:
            raise ObjectiveError(
                f"data.seq_len={seq_len} is too short for span corruption at mask_rate={low}: raise data.seq_len"
            )
        lengths = {}  # (inputs, targets) lengths at each end of the schedule (one for a constant rate)
        for rate in dict.fromkeys((low, high)):
            self._derive(rate)
            self._check(seq_len, raw_length, setting, rate)
            lengths[rate] = self.inputs_length, self.targets_length
        # the longest encoder input is at the lower end, the longest targets at the upper one
        self._model_length = max(lengths[low][0], lengths[high][1])
        self._derive(mask_rate)

    def _derive(self, rate: float) -> None:
        """The counts and lengths of the window at noise density `rate`."""
        self.noise, self.spans = span_counts(self._raw, rate, self.mean_span_length)
        self.inputs_length, self.targets_length = span_lengths(self._raw, rate, self.mean_span_length)

    def _check(self, seq_len: int, raw_length: int | None, setting: str, rate: float) -> None:
        if raw_length is None and self.inputs_length > seq_len:  # only seq_len 2: [kept, sentinel, eos]
            raise ObjectiveError(
                f"data.seq_len={seq_len} is too short for span corruption: the shortest "
                f"window ({self._raw} tokens, one hidden) needs {self.inputs_length} encoder "
                f"positions (kept token, sentinel, eos): use data.seq_len >= {self.inputs_length}"
            )
        if self.spans > self._raw - self.noise:
            raise ObjectiveError(
                f"{setting}.mask_rate={rate} with mean_span_length={self.mean_span_length} cuts a window of "
                f"{self._raw} tokens into {self.spans} noise spans but keeps only {self._raw - self.noise} tokens "
                f"to separate them: T5's layout needs a kept token before each span; lower {setting}.mask_rate or "
                f"raise {setting}.mean_span_length"
            )
        if self.spans > self.vocab.n_sentinels:
            raise ObjectiveError(
                f"span corruption needs {self.spans} sentinels per sequence but the vocabulary has "
                f"{self.vocab.n_sentinels}: raise data.n_sentinels to {self.spans} or more, or lower "
                f"data.seq_len / {setting}.mask_rate, or raise {setting}.mean_span_length"
            )

    def at_step(self, step: int | None, total: int | None = None) -> float | None:
        rate = super().at_step(step, total)
        if rate is not None:
            self._derive(rate)
        return rate

    @property
    def raw_length(self) -> int:
        return self._raw

    @property
    def model_length(self) -> int:
        return self._model_length

    def span_lengths(self, batch: int, generator: torch.Generator, device) -> tuple[torch.Tensor, torch.Tensor]:
        """(non-noise lengths, noise lengths), each [batch, spans]; span j of each kind alternate,
        non-noise first, so the last noise span ends the sequence."""
        keep = random_compositions(self._raw - self.noise, self.spans, batch, generator, device)
        noise = random_compositions(self.noise, self.spans, batch, generator, device)
        return keep, noise

    def noise_mask(self, batch: int, generator: torch.Generator, device) -> torch.Tensor:
        """[batch, raw_length] bool, True on noise tokens, T5's layout (same draws as __call__)."""
        keep, noise = self.span_lengths(batch, generator, device)
        interleaved = torch.stack([keep, noise], dim=2).reshape(batch, 2 * self.spans)
        starts = interleaved.cumsum(dim=1)[:, :-1]
        span_start = torch.zeros(batch, self._raw, dtype=torch.long, device=device).scatter_(1, starts, 1)
        return span_start.cumsum(dim=1) % 2 == 1

    def __call__(self, tokens: torch.Tensor, generator: torch.Generator) -> ObjectiveBatch:
        B, L = tokens.shape
        if L != self._raw:
            raise ObjectiveError(f"span corruption was built for windows of {self._raw} tokens, got {L}")
        if bool((tokens == self.vocab.pad_id).any()):
            raise ObjectiveError(
                "span corruption reads packed windows without padding (T5's layout has no room "
                "for per-row lengths): pack the text into full windows, as the lab's data module does"
            )
        keep, noise = self.span_lengths(B, generator, tokens.device)
        keep_start = (keep + noise).cumsum(dim=1) - (keep + noise)  # where non-noise span j starts
        # encoder: each non-noise span followed by the sentinel of the noise span it replaces
        inputs = self._layout(tokens, keep, keep_start, self.inputs_length, sentinel_first=False)
        # decoder: each noise span preceded by its sentinel
        targets = self._layout(tokens, noise, keep_start + keep, self.targets_length, sentinel_first=True)
        decoder_inputs = torch.cat([torch.full_like(targets[:, :1], self.vocab.bos_id), targets[:, :-1]], dim=1)
        return ObjectiveBatch(
            targets=targets, n_inputs=self.count_inputs(tokens), encoder_inputs=inputs, decoder_inputs=decoder_inputs
        )

    def _layout(
        self, tokens: torch.Tensor, lengths: torch.Tensor, starts: torch.Tensor, length: int, sentinel_first: bool
    ) -> torch.Tensor:
        """Row b: for each span j, tokens[starts[j] : starts[j] + lengths[j]] with sentinel j before
        or after it, then eos. Every row has the same length, so this is one gather (no mask, no loop)."""
        B, k = lengths.shape
        slots = lengths + 1
        out_start = slots.cumsum(dim=1) - slots  # where span j begins in the output
        shift = starts - out_start - int(sentinel_first)  # source = output position + shift
        source = torch.arange(length - 1, device=tokens.device) + torch.repeat_interleave(
            shift.flatten(), slots.flatten(), output_size=B * (length - 1)
        ).view(B, length - 1)
        values = tokens.gather(1, source.clamp(0, tokens.shape[1] - 1))
        sentinel_at = out_start if sentinel_first else out_start + lengths
        sentinels = self.vocab.sentinel_start + torch.arange(k, device=tokens.device, dtype=tokens.dtype)
        values.scatter_(1, sentinel_at, sentinels.expand(B, k))
        return torch.cat([values, torch.full_like(values[:, :1], self.vocab.eos_id)], dim=1)
