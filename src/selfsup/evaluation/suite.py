"""The run's evaluation (`Evaluation`): the fixed exam, minimal pairs, held-out text, probes, tasks and generation
jobs of one run, with their baselines; the keys it logs are listed in selfsup.evaluation's docstring."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from selfsup.common.names import DECODER
from selfsup.data.records import check_count
from selfsup.evaluation.baselines import (
    EvaluationStopped,
    boundary,
    evaluation_done,
    evaluation_started,
    progress_reported,
    say,
)
from selfsup.evaluation.config import ProbeConfig
from selfsup.evaluation.fixed import PANEL_SETTINGS, FixedExam, check_panel
from selfsup.evaluation.generation import Prepared
from selfsup.evaluation.heldout import HeldoutText
from selfsup.evaluation.infilling import INFILLING, NOT_INFILLED, Infilling
from selfsup.evaluation.job_scores import JobScores
from selfsup.evaluation.jobs import GenerationJob
from selfsup.evaluation.pairs import MinimalPairs, scorer_name
from selfsup.evaluation.plan import Plan, plan
from selfsup.evaluation.probe import PROTOCOLS, Finetune
from selfsup.evaluation.scoring import unigram_logprobs
from selfsup.evaluation.stats import ratio_scores
from selfsup.evaluation.task_scores import Encoded, TaskScores
from selfsup.evaluation.tasks import EvalError, Task

FIXED, HELDOUT = "eval/fixed", "eval/heldout"

EXAMPLE_COLUMNS = ["step", "example", "input", "target", "prediction", "accuracy"]


class Evaluation(TaskScores, JobScores):
    """The fixed exam, the minimal pairs and the probes of one run. `check(...)` before training (reads the
    tasks and pair sets, refuses bad ones in one line); `setup(...)` once the model exists; `__call__(model)`
    -> {metric: value}. fixed: {max_tokens: N, mask_rates, span_rates, span_lengths} (the exam's members share
    at most N validation tokens, None: all; the panel, FixedExamConfig), or None / False for no exam; pairs: a
    MinimalPairs, or None."""

    def __init__(
        self,
        fixed: Mapping | bool | None = True,
        every_n_validations: int = 0,
        pairs: MinimalPairs | None = None,
        probe: Mapping | None = None,
        tasks: Mapping[str, Task] | None = None,
        heldout: HeldoutText | None = None,
        finetune: Finetune | None = None,
        generation: Mapping[str, GenerationJob] | None = None,
        infilling: Infilling | None = None,
    ):
        probe = dict(probe or {})
        self.fixed = fixed is not None and fixed is not False
        self.fixed_max_tokens = fixed.get("max_tokens") if isinstance(fixed, Mapping) else None
        self.fixed_panel = {k: fixed[k] for k in PANEL_SETTINGS if k in fixed} if isinstance(fixed, Mapping) else {}
        self.pairs = pairs
        self.heldout = heldout
        self.every_n_validations = every_n_validations
        self.protocol = probe.get("protocol", ProbeConfig.protocol)  # a task's protocol unless it names its own
        self.finetune = finetune if finetune is not None else Finetune()
        self.max_length = probe.get("max_length", ProbeConfig.max_length)
        self.l2 = probe.get("l2")
        self.seed = probe.get("seed", ProbeConfig.seed)
        self.random_init_seeds = probe.get("random_init_seeds", ProbeConfig.random_init_seeds)
        self.tasks = dict(tasks or {})
        for name, task in self.tasks.items():
            task.name = name
        self.jobs = dict(generation or {})  # generation jobs
        for name, job in self.jobs.items():
            job.name = name
        self.infilling = infilling  # the infilling job (a decoder's: set to None at setup for another family)
        self.infilling_baselines: dict[str, float] = {}
        self.written: dict[str, Prepared] = {}  # per job: its examples as the run's family writes them
        self.not_written: dict[str, str] = {}  # per job the run's family cannot write: why (NOT_A_WRITER)
        self.job_baselines: dict[str, float] = {}
        self.written_examples: dict[str, list[list]] = {}  # per job: the last evaluation's WRITTEN_COLUMNS rows
        self.per_class: dict[str, dict] = {}  # per task: the last evaluation's per-class results (probe.per_class)
        self.random_init_written: dict[str, dict[int, str]] = {}  # per job: random-init's writing of its shown examples
        self.exam: FixedExam | None = None
        self.encoded: dict[str, Encoded] = {}
        self.baselines: dict[str, float] = {}
        self.validations = 0
        self.make_model, self.tokenizer = None, None
        self.examples: list[list] = []  # the last evaluation's EXAMPLE_COLUMNS rows (FixedExam.examples)
        self.seconds = 0.0
        self.cache_dir: Path | None = None  # where random-init baselines are kept (setup's cache_dir)
        self.tokenizer_hash: str | None = None
        # plan, fixed, pairs, heldout, infilling, probe, generation: over its evaluations
        self.part_seconds: dict[str, float] = {}
        self.item_seconds: dict[str, float] = {}  # each task's and job's, and their random-init baselines' seconds
        self.random_init: dict[str, np.ndarray] = {}  # per task: random-init outcomes [seeds, test examples]
        self.simple: dict[str, np.ndarray] = {}  # per task: the TF-IDF baseline's outcomes [test examples]
        self.simple_jobs: dict[str, dict] = {}  # per generation job: selfsup.evaluation.simple.written_outcomes
        self.last: dict[str, np.ndarray] = {}  # per task: the last evaluated model's outcomes
        self.fingerprints: dict[str, str] = {}  # per task: a hash of its examples
        self.planned: Plan | None = None  # the next evaluation's plan, when said already (plan)
        self.estimated = 0.0  # the plans' estimates of the run's evaluations, seconds (beside self.seconds)

    # ------------------------------------------------------------------------------ before training
    def check(self, training_documents=None, sharded: bool = False) -> None:
        """Every setting and task, before training starts: EvalError (one line) for anything to fix.
        training_documents: `text in training_documents` says whether a text is a pretraining document (the
        corpus' DocumentKeys). sharded: the model will be sharded (FSDP), which a fine-tune cannot copy."""
        for key, protocol in [("eval.probe.protocol", self.protocol)] + [
            (t.setting("protocol"), t.protocol) for t in self.tasks.values() if t.protocol is not None
        ]:
            if protocol not in PROTOCOLS:
                raise EvalError(f"{key}={protocol} is unknown: use one of {', '.join(PROTOCOLS)}")
            if (
                protocol == "finetune"
                and sharded
                and any(self.protocol_of(t) == "finetune" for t in self.tasks.values())
            ):
                raise EvalError(
                    f"{key}=finetune copies the model, which FSDP shards cannot be: use {key}=linear with trainer=fsdp"
                )
        for key, value in (
            ("eval.probe.max_length", self.max_length),
            ("eval.probe.random_init_seeds", self.random_init_seeds),
        ):
            check_count(key, value)
        self.finetune.check()
        if self.l2 is not None and not (math.isfinite(self.l2) and self.l2 >= 0):
            raise EvalError(
                f"eval.probe.l2={self.l2} must be a finite number >= 0, or null (chosen on held-out training examples)"
            )
        check_count("eval.fixed.max_tokens", self.fixed_max_tokens, optional=True)  # null: the whole split
        check_panel(**self.fixed_panel)
        if self.pairs is not None:
            self.pairs.check()
        for key, text in (("eval.heldout", self.heldout), ("eval.infilling", self.infilling)):
            if text is not None:
                text.check()
                inside = [d for d in text.documents if training_documents and d in training_documents]
                if inside:
                    raise EvalError(
                        f"{key}: {len(inside)} of its documents are documents of the pretraining data (e.g. "
                        f"{inside[0][:40]!r}): a held-out text must be held out; use another text or other data.paths"
                    )
        if self.infilling is not None:
            if INFILLING in self.tasks or INFILLING in self.jobs:
                raise EvalError(
                    f"eval.tasks.{INFILLING} or eval.generation.{INFILLING} shares its name with the infilling job "
                    f"(eval/{INFILLING}/...): rename it, or set eval.infilling=null"
                )
        if self.every_n_validations < 0:
            raise EvalError(
                f"eval.every_n_validations={self.every_n_validations} must be 0 (after training only) or more"
            )
        self.check_jobs(training_documents, sharded)
        self.check_tasks(training_documents)

    # ------------------------------------------------------------------------------ once the model exists
    def setup(
        self,
        architecture: str,
        vocab,
        tokenizer,
        seq_len: int,
        val_tokens,
        model_length: int,
        make_model=None,
        train_tokens=None,
        objective: str | None = None,
        span: float | None = None,
        cache_dir=None,
        infills: bool = False,
    ) -> None:
        """The exam's windows, the pairs' token ids and the tasks' encoded examples. make_model() builds an
        untrained model of the run's shape (the random-init baselines of the pairs and the probes, each from
        seeds of their own: the same for every run of a shape, cached in cache_dir). train_tokens: the training split
        (the pairs' n-gram references); objective, span: the run's objective and mean span length (the
        pairs' scorer names, the denoise scorer's spans); infills: the run was trained to fill in the middle (the
        infilling job's layout)."""
        self.make_model, self.tokenizer = make_model, tokenizer
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.tokenizer_hash = hashlib.sha256(tokenizer.to_str().encode()).hexdigest() if tokenizer is not None else None
        unigram = (
            unigram_logprobs(train_tokens, vocab.size)
            if (self.fixed or self.heldout is not None) and train_tokens is not None and len(train_tokens)
            else None
        )
        if self.heldout is not None:
            self.heldout.setup(
                architecture, vocab, tokenizer, model_length, unigram, scorer_name(architecture, objective)
            )
        if self.fixed:
            self.exam = FixedExam(
                architecture, vocab, seq_len, val_tokens, self.fixed_max_tokens, unigram, **self.fixed_panel
            )
            if self.exam.model_length > model_length:
                raise EvalError(
                    f"the fixed exam of {architecture} models needs {self.exam.model_length} positions, "
                    f"the model has {model_length}: set eval.fixed=null"
                )
        if self.pairs is not None:
            self.pairs.setup(
                architecture, vocab, tokenizer, model_length, train_tokens, objective, span, make_model, cache_dir
            )
        self.setup_tasks(architecture, vocab, tokenizer, model_length)
        self.setup_jobs(architecture, vocab, tokenizer, model_length)
        if self.infilling is not None and architecture == DECODER:
            self.infilling.setup(vocab, tokenizer, model_length, infills)
        elif self.infilling is not None:
            self.not_written[INFILLING] = NOT_INFILLED

    def part_settings(self) -> dict[str, dict]:
        """{part (eval/<name>): the settings that made its scores}: what evaluated.json records beside each
        evaluation, the report shows beside each score, and the verdict never pools across."""
        out: dict[str, dict] = {}
        if self.fixed:
            out["eval/fixed"] = {"max_tokens": self.fixed_max_tokens, **self.fixed_panel}
        if self.pairs is not None:
            p = self.pairs
            out["eval/pairs"] = {
                "random_init_seeds": p.random_init_seeds,
                "builtin": p.builtin,
                "types": list(p.types),
                "max_pairs": p.max_pairs,
                "max_words": p.max_words,
                "sets": sorted(p.sets),
                "pairs": sum(len(getattr(ps, "kept", None) or []) for ps in p.pair_sets),
            }
        if self.heldout is not None:
            out["eval/heldout"] = {"source": self.heldout.text.source, "max_bytes": self.heldout.max_bytes}
        if self.infilling is not None and INFILLING not in self.not_written:
            job = self.infilling
            out[f"eval/{INFILLING}"] = {
                "protocol": "zero-shot",
                "random_init_seeds": self.random_init_seeds,
                "test_examples": len(job.rows) or None,
                "source": job.text.source,
                "max_examples": job.max_examples,
                "max_words": job.max_words,
                "middle_words": job.middle_words,
                "fim_layout": job.fim_layout,
            }
        for name, task in self.tasks.items():
            encoded = self.encoded.get(name)
            n = (len(encoded.train), len(encoded.test)) if encoded is not None else (None, None)
            out[f"eval/{name}"] = {
                "protocol": self.protocol_of(task),
                **self.protocol_settings(self.protocol_of(task), n[0]),
                "random_init_seeds": self.random_init_seeds,
                "train_examples": n[0],
                "test_examples": n[1],
                "max_train_examples": task.max_train_examples,
                "max_test_examples": task.max_test_examples,
            }
        for name, job in self.jobs.items():
            written = self.written.get(name)
            n = len(written.train.inputs) if written is not None else None
            out[f"eval/{name}"] = {
                "protocol": "finetune",
                **self.protocol_settings("finetune", n),
                "random_init_seeds": self.random_init_seeds,
                "train_examples": n,
                "test_examples": len(written.sources) if written is not None else None,
                "max_train_examples": job.max_train_examples,
                "max_test_examples": job.max_test_examples,
                "max_new_tokens": job.max_new_tokens,
            }
        return out

    def protocol_settings(self, protocol: str, n: int | None) -> dict:
        """A protocol's settings as they ran on a task of n training examples (fine-tuning: its steps by the rule)."""
        if protocol != "finetune":
            return {"max_length": self.max_length, "l2": self.l2, "seed": self.seed}
        f = self.finetune.for_examples(n) if n is not None else self.finetune
        keys = ("steps", "lr", "batch_size", "warmup", "weight_decay", "max_length", "seeds", "pooling")
        return {**{k: getattr(f, k) for k in keys}, "seed": self.seed}

    def pair_scorers(self) -> dict[str, str]:
        """{metric prefix: the scorer's name} of each set of minimal pairs and scorer, e.g. {'eval/pairs': 'summed
        log-prob', 'eval/pairs/blimp': 'summed log-prob'} (summary.json: pairs_scorers)."""
        return self.pairs.prefixes() if self.pairs is not None else {}

    def outcomes(self) -> dict[str, np.ndarray]:
        """The last evaluation's per-example outcomes (1 right, 0 wrong, 0.5 a tie), for comparing runs on the
        same examples (selfsup.results.verdict; the run dir's outcomes.npz): for every score key K with a margin
        (eval/pairs..., eval/<task>), K: the model's [n], K|random_init: its baselines' [seeds, n], K|examples:
        a hash of the examples; and the fixed exam's per-window arrays (FixedExam.sums), eval/fixed|nll, |count,
        |member, |unigram, with eval/fixed|examples, a hash of its windows: runs with the same hash are paired."""
        found = []
        if self.pairs is not None:
            fingerprints = self.pairs.fingerprints()
            found = [
                (key, self.pairs.last, self.pairs.random_init, fingerprints.get(key), key) for key in self.pairs.last
            ]
        fingerprints = {**self.fingerprints}
        if self.infilling is not None and self.infilling.rows:
            fingerprints[INFILLING] = self.infilling.fingerprint
        found += [
            (name, self.last, self.random_init, fingerprints.get(self.job_of(name)), f"eval/{name}")
            for name in self.last
        ]
        out = {}
        for name, last, random_init, examples, key in found:
            if name in random_init and examples is not None:
                out.update(
                    {key: last[name], f"{key}|random_init": random_init[name], f"{key}|examples": np.array(examples)}
                )
        if self.exam is not None and self.exam.windows_last:
            out.update({f"{FIXED}|{k}": v for k, v in self.exam.windows_last.items()})
            out[f"{FIXED}|examples"] = np.array(self.exam.fingerprint)
        if self.heldout is not None and self.heldout.last:
            out.update({f"{HELDOUT}|{k}": v for k, v in self.heldout.last.items()})
            out[f"{HELDOUT}|examples"] = np.array(self.heldout.fingerprint)
        return out

    @staticmethod
    def job_of(key: str) -> str:
        """The task or job of an outcome's name: `probe` -> probe, `continuation/loss` -> continuation."""
        return key.split("/")[0]

    def due(self, last: bool) -> bool:
        """Called once per validation: run now? At the last one, and every every_n_validations-th."""
        self.validations += 1
        return last or (self.every_n_validations > 0 and self.validations % self.every_n_validations == 0)

    # ------------------------------------------------------------------------------ scoring
    def __call__(self, model: torch.nn.Module) -> dict[str, float] | None:
        """All metrics of `model` (not changed; the training RNG is not touched); None when a stop signal ended
        the evaluation at a boundary (between parts, tasks and random-init seeds): nothing of it is kept."""
        kept = dict(self.last), dict(self.pairs.last) if self.pairs is not None else {}
        windows = self.exam.windows_last if self.exam is not None else {}
        documents = self.heldout.last if self.heldout is not None else {}
        try:
            return self.evaluate(model)
        except EvaluationStopped as stopped:
            signal_name, where = stopped.args
            self.last = kept[0]
            if self.pairs is not None:
                self.pairs.last = kept[1]
            if self.exam is not None:
                self.exam.windows_last = windows
            if self.heldout is not None:
                self.heldout.last = documents
            logging.getLogger("selfsup").warning(
                f"{signal_name}: the evaluation stopped in {where}; none of it is kept"
            )
            return None

    def plan(self, model: torch.nn.Module, pending: set | None = None) -> Plan:
        """What the next evaluation of `model` will do and about how long it will take (selfsup.evaluation.plan;
        pending: cache entries earlier runs will have written); the next evaluation counts down from it."""
        self.planned = plan(self, model, pending)
        return self.planned

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        started = time.perf_counter()
        devices = [model_device(model)] if model_device(model).type == "cuda" else []
        # inside Lightning's validation (inference mode): tensors made here must be usable by autograd (the
        # linear classifier, a fine-tune); a compiled model runs eagerly (the probe's shapes would recompile)
        with (
            torch.inference_mode(False),
            torch.no_grad(),
            torch.random.fork_rng(devices=devices),
            torch.compiler.set_stance("force_eager"),
        ):
            if self.planned is None and progress_reported():
                with self.timed("plan"):
                    say(self.plan(model).line())
            if self.planned is not None:
                self.estimated += self.planned.seconds
            evaluation_started(self.planned.seconds if self.planned is not None else None)
            self.planned = None
            metrics = {}
            if self.exam is not None:
                boundary("the fixed exam")
                with self.timed("fixed"):
                    metrics.update(self.exam.metrics(model))
                    metrics.update(exam_interval(self.exam.windows_last))
                    if self.tokenizer is not None:
                        self.examples = self.exam.examples(model, self.tokenizer)
            if self.pairs is not None:
                boundary("the minimal pairs")
                with self.timed("pairs"):
                    metrics.update(self.pairs(model))
            if self.heldout is not None:
                boundary("the held-out text")
                with self.timed("heldout"):
                    metrics.update(self.heldout(model))
            if self.infilling is not None and self.infilling.rows:
                boundary("the infilling job")
                with self.timed(INFILLING):
                    metrics.update(self.infilling_metrics(model))
            with self.timed("probe") if self.encoded else contextlib.nullcontext():
                if self.encoded and not self.baselines:  # the same for every evaluation of the run: once
                    with self.timed("tasks' random-init", self.item_seconds):
                        self.baselines = self.random_init_and_majority(model)
                for name in self.encoded:
                    boundary(f"task {name}")
                    with self.timed(name, self.item_seconds):
                        metrics.update(self.probe_metrics(model, name))
                metrics.update(self.baselines)
            with self.timed("generation") if self.written else contextlib.nullcontext():
                if self.written and not self.job_baselines:  # the same for every evaluation of the run: once
                    with self.timed("generation jobs' random-init", self.item_seconds):
                        self.job_baselines = self.writers_random_init(model)
                for name in self.written:
                    boundary(f"generation job {name}")
                    with self.timed(name, self.item_seconds):
                        metrics.update(self.job_metrics(model, name))
                metrics.update(self.job_baselines)
        self.seconds += time.perf_counter() - started
        evaluation_done(time.perf_counter() - started)
        return metrics

    @contextlib.contextmanager
    def timed(self, part: str, into: dict | None = None):
        """Adds the seconds of the block to self.part_seconds[part] (summary.json: eval_part_seconds), or to
        `into`[part] (item_seconds: each task's and job's)."""
        into = self.part_seconds if into is None else into
        started = time.perf_counter()
        try:
            yield
        finally:
            into[part] = into.get(part, 0.0) + time.perf_counter() - started

    def fresh_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """A new model of `model`'s shape, on its device, initialised from the global RNG: unsharded and not
        compiled (make_model from setup; else a re-initialised deep copy)."""
        if self.make_model is None:
            fresh = copy.deepcopy(model)
            fresh._init_weights()
            return fresh
        return self.make_model().to(model_device(model))

    def copy(self, model: torch.nn.Module) -> torch.nn.Module:
        """An independent copy of `model`'s weights to fine-tune (the run's model is never changed)."""
        fresh = self.fresh_model(model)
        fresh.load_state_dict(model.state_dict())
        return fresh


def exam_interval(windows: dict[str, np.ndarray]) -> dict[str, float]:
    """The fixed exam's uncertainty from its per-window arrays (FixedExam.sums): eval/fixed/loss_low, _high (the
    stratified bootstrap 95% interval of eval/fixed/loss over the exam's windows) and _se (the replicates' sd,
    what a tuner's decision must exceed); with a unigram reference, eval/fixed/unigram_gap (the loss minus the
    training split's unigram on the same targets; below 0: more than word frequencies learned) with its paired
    interval, _low and _high. {} without a scored target."""
    return ratio_scores(windows, f"{FIXED}/loss")


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device
