"""What an evaluation will do and about how long it will take, said before it starts (`plan`).

Each part of the evaluation is listed with its work (pairs, tasks' fine-tunes and seeds, generation jobs'
writers) and which random-init baselines the cache already holds (those cost nothing). Its seconds come from a
short warm-up on this machine and this model: a sample of each part's own work timed and scaled, never a
constant:

    scoring   (fixed exam, minimal pairs, held-out text) every k-th forward row of the part, scored, times k
              (the rows' sample fills at least 4 batches)
    linear    features of every k-th example times k, plus the classifier's fits at their iteration cap
              (one loss-and-gradient evaluation timed at full size)
    finetune  the copy and a sample of the test examples' predictions (0 steps), scaled to the test split, plus
              the loop's seconds per step (10 steps less that) times its steps, times the fine-tunes (trained
              seeds + random-init not cached)
    writers   the same for a generation job's fine-tuning, plus a sample of its test examples scored and written
              (greedy, as many tokens as its references have, at most max_new_tokens)
    infilling its first 32 examples scored and written, scaled to all, times 1 + its random-init seeds

The warm-up takes a few per cent of the evaluation; the estimate is checked against the real time in
docs/benchmarks.md (`selfsup-bench eval`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import torch

from selfsup.evaluation.baselines import duration, planning
from selfsup.evaluation.scoring import Rows, score_rows

SAMPLE = 50  # a scoring part's warm-up scores every SAMPLE-th row


@dataclass
class Step:
    """One part of the plan: what it does, its estimated seconds (cached baselines excluded), and its baselines:
    how many there are and how many the cache holds."""

    name: str
    what: str
    seconds: float
    baselines: int = 0
    cached: int = 0


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    warmup: float = 0.0  # seconds the warm-up took

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)

    @property
    def baselines(self) -> tuple[int, int]:
        """(random-init baselines read from the cache, random-init baselines in all)."""
        return sum(s.cached for s in self.steps), sum(s.baselines for s in self.steps)

    def line(self) -> str:
        """`plan: the fixed exam; the minimal pairs (2,400 pairs x 2 scorers, random-init 3 seeds: 3 cached); ...;
        about 2 min (a 3 s warm-up)`."""
        parts = "; ".join(f"{s.name} ({s.what})" if s.what else s.name for s in self.steps)
        return f"plan: {parts}; about {duration(self.seconds)} (a {self.warmup:.0f} s warm-up)"


def seeds_said(count: int, cached: int) -> str:
    """`random-init 3 seeds: 2 cached`."""
    what = f"random-init {count} seed{'s' if count != 1 else ''}"
    return what + (f": {cached} cached" if cached else "")


def caps(source, kept: tuple[int, int], cut: int = 0, length_key: str = "") -> str:
    """What a task's or job's caps leave out, with the override that lifts each: `, 2,000 of 5,312 training
    examples (eval.tasks.x.max_train_examples=null for all), 12 reach eval.finetune.max_length=128 tokens (longer
    ones cut)`."""
    said = ""
    for (kind, key), have, found in zip(
        (("training", "max_train_examples"), ("test", "max_test_examples")), kept, source.found or kept
    ):
        if found > have:
            said += f", {have:,} of {found:,} {kind} examples ({source.setting(key)}=null for all)"
    if cut:
        said += f", {cut:,} reach {length_key} tokens (longer ones cut)"
    return said


def full(mask: torch.Tensor) -> int:
    """Examples that fill every position of their encoding (cut to it, or exactly its length)."""
    return int(mask[:, -1].sum()) if mask.numel() else 0


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def sampled(rows: Rows, every: int) -> Rows:
    """Every `every`-th row of `rows` (the same mix of lengths)."""
    pick = range(0, len(rows.sentence), every)
    return Rows(
        [rows.encoder[i] for i in pick] if rows.encoder else [],
        [rows.decoder[i] for i in pick] if rows.decoder else [],
        [rows.scored[i] for i in pick],
        [rows.sentence[i] for i in pick],
        rows.bidirectional,
    )


def rows_seconds(model: torch.nn.Module, rows: Rows, n_sentences: int, pad_id: int, batch_tokens: int) -> float:
    """The seconds score_rows takes over `rows`: every k-th row scored, times k; k is SAMPLE, or less where the
    sample would fill fewer than 4 of score_rows' batches (a batch's fixed costs would count k times over)."""
    positions = sum(rows.lengths())
    every = max(1, min(SAMPLE, positions // (4 * batch_tokens)))
    return every * timed(lambda: score_rows(model, sampled(rows, every), n_sentences, pad_id, batch_tokens))


def loop_seconds(run, steps: int, rest_scale: float) -> float:
    """Seconds of `run(k)` (a fine-tuning of k steps, then a sample of the test examples scored) scaled to `steps`
    and to the whole test split: after one untimed step (a first call's own costs), the rest (the copy, the
    sample's scoring) timed at 0 steps, times rest_scale (test examples / the sample's), and the steps' seconds
    from 10 steps less that rest."""
    run(1)
    rest, ten = timed(lambda: run(0)), timed(lambda: run(10))
    return rest * max(1.0, rest_scale) + steps * max(0.0, (ten - rest) / 10)


def exam_seconds(exam, model: torch.nn.Module) -> float:
    """The fixed exam's seconds: every SAMPLE-th window of each member scored, times SAMPLE."""
    members, last = exam.members, exam.windows_last
    every = SAMPLE if min(len(w) for _, w in members.values()) >= 4 * SAMPLE else 1
    exam.members = {name: (objective, windows[::every]) for name, (objective, windows) in members.items()}
    try:
        return every * timed(lambda: exam.sums(model))
    finally:
        exam.members, exam.windows_last = members, last


def plan(evaluation, model: torch.nn.Module, pending: set | None = None) -> Plan:
    """The plan of `evaluation` (an Evaluation after setup) on `model`: each part, its baselines and what the
    cache holds of them, its seconds from a warm-up (the module's docstring). pending: cache entries an earlier
    run of this command will have written (counted as cached; this plan's are added). Neither the model, the
    global RNG nor the evaluation's state is changed."""
    pending = set() if pending is None else pending

    def counted(paths) -> tuple[int, int]:
        """(baselines computed here, read from the cache) of these cache entries; those computed here are
        pending for later runs."""
        todo = cached = 0
        for path in paths:
            if path is not None and (path.is_file() or path in pending):
                cached += 1
            else:
                todo += 1
                if path is not None:
                    pending.add(path)
        return todo, cached

    from selfsup.evaluation.generation import finetune_writer, rows, score
    from selfsup.evaluation.probe import features, finetune, fits_seconds
    from selfsup.loss import stream_seed

    planning()
    started, steps = time.perf_counter(), []
    device = next(model.parameters()).device
    ev = evaluation
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
        if ev.exam is not None:
            members = len(ev.exam.members)
            what = f"{members} member{'s' if members > 1 else ''}"
            if ev.fixed_max_tokens is not None:  # the cap on the validation tokens the exam reads
                what += f", at most {ev.fixed_max_tokens:,} validation tokens (eval.fixed.max_tokens=null for all)"
            steps.append(Step("the fixed exam", what, exam_seconds(ev.exam, model)))
        pairs = ev.pairs
        if pairs is not None:
            seconds, cached, count = 0.0, 0, 0
            for prefix in pairs.scorers:
                one = rows_seconds(
                    model, pairs.rows(prefix), len(pairs.sentences), pairs.vocab.pad_id, pairs.batch_tokens
                )
                seeds = range(0 if pairs.baselines or pairs.make_model is None else pairs.random_init_seeds)
                todo, hits = counted(pairs.random_init_entry(prefix, seed, device)[1] for seed in seeds)
                count, cached = count + todo + hits, cached + hits
                seconds += one * (1 + todo)
            n = sum(len(good) for good, _ in pairs.index)
            what = f"{n:,} pairs, {len(pairs.scorers)} scorer{'s' if len(pairs.scorers) > 1 else ''}"
            if count:
                what += f", {seeds_said(pairs.random_init_seeds, cached // len(pairs.scorers))}"
            if pairs.builtin:  # the built-in set's caps
                what += (
                    f", the built-in set's first {pairs.max_pairs:,} of each type (eval.pairs.max_pairs) of at most "
                    f"{pairs.max_words} words (eval.pairs.max_words)"
                )
            if pairs.skipped:
                what += f", {pairs.skipped:,} left out: longer than the model's positions (raise data.seq_len)"
            steps.append(Step("the minimal pairs", what, seconds, count, cached))
        if ev.heldout is not None:
            held = ev.heldout
            rows_ = held.rows(held.pieces, held.vocab)
            seconds = rows_seconds(model, rows_, len(held.pieces), held.vocab.pad_id, held.batch_tokens)
            what = f"{len(held.pieces):,} pieces of its first {held.max_bytes:,} bytes (eval.heldout.max_bytes)"
            steps.append(Step("the held-out text", what, seconds))
        fresh = {}  # the untrained model of each random-init seed, built as the baselines build it

        def untrained(k: int):
            if k not in fresh:
                torch.manual_seed(stream_seed("probe-random-init", ev.seed, k))
                fresh[k] = ev.fresh_model(model)
            return fresh[k]

        for name, task in ev.encoded.items():
            seeds = range(0 if ev.baselines else ev.random_init_seeds)
            todo, cached = counted(ev.task_entry(untrained(k), name) for k in seeds)
            (ids, mask), labels = task.train_inputs, task.train_labels
            test_ids, test_mask = task.test_inputs
            if task.protocol == "finetune":
                sample = (test_ids[:64], test_mask[:64])

                def run(k, task=task):
                    finetune(
                        ev.copy(model),
                        (ids, mask, labels),
                        sample,
                        task.n_classes,
                        dataclasses.replace(ev.finetune, steps=k),
                        stream_seed("finetune", ev.seed, 0),
                        ev.start_id,
                    )

                steps_ = ev.finetune.for_examples(len(labels)).steps
                one = loop_seconds(run, steps_, len(test_ids) / 64)
                runs = ev.finetune.seeds + todo
                what = f"finetune: {ev.finetune.seeds} seeds + {seeds_said(ev.random_init_seeds, cached)}, " + (
                    f"{steps_} steps each, {len(labels):,} training and {len(test_ids):,} test examples"
                )
                length_key = f"eval.finetune.max_length={ids.shape[1]}"
            else:
                every = SAMPLE if len(labels) >= 4 * SAMPLE else 1
                train_x: list = []
                reading = every * timed(
                    lambda: (
                        train_x.append(features(model, ids[::every], mask[::every]))
                        or features(model, test_ids[::every], test_mask[::every])
                    )
                )
                # the classifier's fits at full size (the sample's features repeated to the training split's count)
                x = train_x[0].repeat(every, 1)[: len(labels)]
                fit = fits_seconds(x, labels[: len(x)], task.n_classes, ev.l2)
                one, runs = reading + fit, 1 + todo
                what = f"linear: {seeds_said(ev.random_init_seeds, cached)}, {len(labels):,} training and " + (
                    f"{len(test_ids):,} test examples"
                )
                length_key = f"eval.probe.max_length={ids.shape[1]}"
            what += caps(ev.tasks[name], (len(labels), len(test_ids)), full(mask) + full(test_mask), length_key)
            steps.append(Step(f"task {name}", what, one * runs, todo + cached if not ev.baselines else 0, cached))
        for name, job in ev.written.items():
            seeds = range(0 if ev.job_baselines else ev.random_init_seeds)
            todo, cached = counted(ev.writer_entry(untrained(k), name, k) for k in seeds)
            pick = torch.arange(min(64, len(job.sources)))
            target = float((job.test.labels != -100).sum(1).float().mean()) if len(job.sources) else 0.0
            sample = dataclasses.replace(
                job,
                test=rows(job.test, pick),
                sources=job.sources[: len(pick)],
                source_texts=job.source_texts[: len(pick)],
                references=job.references[: len(pick)],
                max_new_tokens=max(1, min(job.max_new_tokens, round(target))),
            )

            def write(k, job=job, sample=sample):
                writer = ev.copy(model)
                finetune_writer(
                    writer,
                    job.train,
                    dataclasses.replace(ev.finetune, steps=k),
                    stream_seed("finetune-writer", ev.seed, 0),
                )
                score(writer, sample, ev.tokenizer, *ev.ids)

            steps_ = ev.finetune.for_examples(len(job.train.inputs)).steps
            one = loop_seconds(write, steps_, len(job.sources) / 64)
            writers = f"{ev.finetune.seeds} writer{'s' if ev.finetune.seeds != 1 else ''}"
            what = f"{writers} + {seeds_said(ev.random_init_seeds, cached)}, " + (
                f"{steps_} steps each, {len(job.train.inputs):,} training and {len(job.sources):,} test examples"
            )
            what += caps(ev.jobs[name], (len(job.train.inputs), len(job.sources)))
            what += (
                f", at most {ev.jobs[name].max_new_tokens} tokens written ({ev.jobs[name].setting('max_new_tokens')})"
            )
            baselines = todo + cached if not ev.job_baselines else 0
            steps.append(Step(f"generation job {name}", what, one * (ev.finetune.seeds + todo), baselines, cached))
        job = ev.infilling
        if job is not None and job.rows:
            seeds = range(0 if ev.infilling_baselines else ev.random_init_seeds)
            todo, cached = counted(ev.infilling_entry(untrained(k), k) for k in seeds)
            tick = time.perf_counter()
            job.sample(32).scores(model)
            one = (time.perf_counter() - tick) * len(job.rows) / min(32, len(job.rows))
            what = (
                f"{len(job.rows):,} examples zero-shot in the {job.layout} layout + "
                f"{seeds_said(ev.random_init_seeds, cached)}, the first "
                f"{job.max_words} words of each of the first {job.max_examples} documents (eval.infilling.max_examples, "
                f"max_words), middles of 1 to {job.middle_words} words"
            )
            steps.append(Step("the infilling job", what, one * (1 + todo), todo + cached, cached))
    return Plan(steps, time.perf_counter() - started)
