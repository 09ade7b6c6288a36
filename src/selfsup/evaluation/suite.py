"""The run's evaluation (`Evaluation`): the fixed exam, minimal pairs, held-out text, probes, tasks and generation
jobs of one run, with their baselines; the keys it logs are listed in selfsup.evaluation's docstring."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import astuple, dataclass
from pathlib import Path

import numpy as np
import torch

from selfsup.data.records import check_count
from selfsup.evaluation.baselines import (
    EvaluationStopped,
    boundary,
    cached,
    evaluation_done,
    evaluation_started,
    untrained_key,
)
from selfsup.evaluation.fixed import PANEL_SETTINGS, FixedExam, check_panel
from selfsup.evaluation.generation import NOT_A_WRITER, SCORES, WRITERS, Prepared, finetune_writer, prepare, score
from selfsup.evaluation.heldout import HeldoutText
from selfsup.evaluation.pairs import MinimalPairs, mean_sd, scorer_name
from selfsup.evaluation.probe import (
    PROTOCOLS,
    READING,
    Finetune,
    encode,
    features,
    finetune,
    linear_probe,
    majority,
    scores,
)
from selfsup.evaluation.scoring import unigram_logprobs
from selfsup.evaluation.stats import margin, ratio_scores, standard_error
from selfsup.evaluation.tasks import EvalError, Examples, GenerationJob, Task, parts
from selfsup.loss import stream_seed

FIXED, HELDOUT = "eval/fixed", "eval/heldout"

EXAMPLE_COLUMNS = ["step", "example", "input", "target", "prediction", "accuracy"]
WRITTEN_COLUMNS = ["step", "example", "source", "target", "prediction", "exact_match", "token_f1"]
WRITTEN_SHOWN = 8  # test examples of each generation job in its W&B Table


class Evaluation:
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
    ):
        probe = dict(probe or {})
        self.fixed = fixed is not None and fixed is not False
        self.fixed_max_tokens = fixed.get("max_tokens") if isinstance(fixed, Mapping) else None
        self.fixed_panel = {k: fixed[k] for k in PANEL_SETTINGS if k in fixed} if isinstance(fixed, Mapping) else {}
        self.pairs = pairs
        self.heldout = heldout
        self.every_n_validations = every_n_validations
        self.protocol = probe.get("protocol", "linear")  # a task's protocol unless it names its own
        self.finetune = finetune if finetune is not None else Finetune()
        self.max_length = probe.get("max_length", 64)
        self.l2 = probe.get("l2")
        self.seed = probe.get("seed", 0)
        self.random_init_seeds = probe.get("random_init_seeds", 3)
        self.tasks = dict(tasks or {})
        for name, task in self.tasks.items():
            task.name = name
        self.jobs = dict(generation or {})  # generation jobs
        for name, job in self.jobs.items():
            job.name = name
        self.written: dict[str, Prepared] = {}  # per job: its examples as the run's family writes them
        self.not_written: dict[str, str] = {}  # per job the run's family cannot write: why (NOT_A_WRITER)
        self.job_baselines: dict[str, float] = {}
        self.written_examples: dict[str, list[list]] = {}  # per job: the last evaluation's WRITTEN_COLUMNS rows
        self.exam: FixedExam | None = None
        self.encoded: dict[str, Encoded] = {}
        self.baselines: dict[str, float] = {}
        self.validations = 0
        self.make_model, self.tokenizer = None, None
        self.examples: list[list] = []  # the last evaluation's EXAMPLE_COLUMNS rows (FixedExam.examples)
        self.seconds = 0.0
        self.cache_dir: Path | None = None  # where random-init baselines are kept (setup's cache_dir)
        self.tokenizer_hash: str | None = None
        self.part_seconds: dict[str, float] = {}  # fixed, pairs, probe, generation: seconds over the run's evaluations
        self.item_seconds: dict[str, float] = {}  # each task's and job's, and their random-init baselines' seconds
        self.random_init: dict[str, np.ndarray] = {}  # per task: random-init outcomes [seeds, test examples]
        self.last: dict[str, np.ndarray] = {}  # per task: the last evaluated model's outcomes
        self.fingerprints: dict[str, str] = {}  # per task: a hash of its examples

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
        if self.heldout is not None:
            self.heldout.check()
            inside = [d for d in self.heldout.documents if training_documents and d in training_documents]
            if inside:
                raise EvalError(
                    f"eval.heldout: {len(inside)} of its documents are documents of the pretraining data (e.g. "
                    f"{inside[0][:40]!r}): a held-out text must be held out; use another text or other data.paths"
                )
        if self.every_n_validations < 0:
            raise EvalError(
                f"eval.every_n_validations={self.every_n_validations} must be 0 (after training only) or more"
            )
        if sharded and self.jobs:
            raise EvalError(
                "eval.generation fine-tunes a copy of the model, which FSDP shards cannot be: use eval.generation=null "
                "with trainer=fsdp"
            )
        for name, job in self.jobs.items():
            if name in self.tasks:
                raise EvalError(
                    f"eval.generation.{name} and eval.tasks.{name} share a name: their scores (eval/{name}/...) "
                    f"would mix; rename one"
                )
            train, test = job.load()
            inside = [t for pair in train + test for t in pair if training_documents and t in training_documents]
            if inside:
                raise EvalError(
                    f"generation job {name}: {len(inside)} of its texts are documents of the pretraining data (e.g. "
                    f"{inside[0][:40]!r}): a job must be held out from pretraining; use other examples or other "
                    f"data.paths"
                )
        for name, task in self.tasks.items():
            train, test = task.load()
            if training_documents:
                overlap = [p for t in train.texts + test.texts for p in parts(t) if p in training_documents]
                if overlap:
                    raise EvalError(
                        f"task {name}: {len(overlap)} of its examples are documents of the pretraining "
                        f"data (e.g. {overlap[0][:40]!r}): a probe must be held out from pretraining; "
                        f"use other examples or other data.paths"
                    )

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
    ) -> None:
        """The exam's windows, the pairs' token ids and the tasks' encoded examples. make_model() builds an
        untrained model of the run's shape (the random-init baselines of the pairs and the probes, each from
        seeds of their own: the same for every run of a shape, cached in cache_dir). train_tokens: the training split
        (the pairs' n-gram references); objective, span: the run's objective and mean span length (the
        pairs' scorer names, the denoise scorer's spans)."""
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
        self.start_id = vocab.bos_id
        for name, task in self.tasks.items():
            train, test = task.load()
            protocol = self.protocol_of(task)
            length = min(self.finetune.max_length if protocol == "finetune" else self.max_length, model_length)
            self.encoded[name] = Encoded(
                encode(tokenizer, train.texts, length, vocab.pad_id, vocab.eos_id, architecture),
                torch.tensor(train.labels),
                encode(tokenizer, test.texts, length, vocab.pad_id, vocab.eos_id, architecture),
                torch.tensor(test.labels),
                len(task.classes),
                train,
                test,
                protocol,
            )
            self.fingerprints[name] = hashlib.sha256(
                json.dumps([train.texts, train.labels, test.texts, test.labels]).encode()
            ).hexdigest()
        self.ids = (vocab.eos_id, vocab.bos_id, vocab.pad_id)
        for name, job in self.jobs.items():
            if architecture not in WRITERS:
                self.not_written[name] = NOT_A_WRITER
                continue
            train, test = job.load()
            length = min(self.finetune.max_length, model_length)
            self.written[name] = prepare(architecture, tokenizer, train, test, *self.ids, length, job.max_new_tokens)
            self.fingerprints[name] = hashlib.sha256(json.dumps([train, test, length, job.max_new_tokens]).encode())
            self.fingerprints[name] = self.fingerprints[name].hexdigest()

    def protocol_of(self, task: Task) -> str:
        """A task's protocol: its own, else eval.probe.protocol."""
        return task.protocol or self.protocol

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
        found += [
            (name, self.last, self.random_init, self.fingerprints.get(self.job_of(name)), f"eval/{name}")
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

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        started = time.perf_counter()
        evaluation_started()
        devices = [model_device(model)] if model_device(model).type == "cuda" else []
        # inside Lightning's validation (inference mode): tensors made here must be usable by autograd (the
        # linear classifier, a fine-tune); a compiled model runs eagerly (the probe's shapes would recompile)
        with (
            torch.inference_mode(False),
            torch.no_grad(),
            torch.random.fork_rng(devices=devices),
            torch.compiler.set_stance("force_eager"),
        ):
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

    def predict(self, model: torch.nn.Module, name: str, seed: int = 0) -> torch.Tensor:
        """The predicted class of each test example of task `name`: by the linear probe on frozen features, or
        after fine-tuning a copy of `model` from fine-tuning seed `seed` (the run's model is not changed)."""
        task = self.encoded[name]
        if task.protocol == "finetune":
            return finetune(
                self.copy(model),
                (*task.train_inputs, task.train_labels),
                task.test_inputs,
                task.n_classes,
                self.finetune,
                stream_seed("finetune", self.seed, seed),
                self.start_id,
            )
        return linear_probe(
            features(model, *task.train_inputs),
            task.train_labels,
            features(model, *task.test_inputs),
            task.n_classes,
            self.l2,
        )

    def probe_metrics(self, model: torch.nn.Module, name: str) -> dict[str, float]:
        """eval/<name>/accuracy, .../macro_f1 (fine-tuned: the means over eval.finetune.seeds fine-tuning seeds, and
        accuracy_sd, their accuracies' sd) and, beside the random-init baselines, the margin of the accuracy over
        them with its paired bootstrap 95% interval (test examples, random-init seeds and fine-tuning seeds
        resampled)."""
        task = self.encoded[name]
        seeds = self.finetune.seeds if task.protocol == "finetune" else 1
        outcomes, runs = [], []
        for k in range(seeds):
            if k:
                boundary(f"task {name}'s fine-tuning seed {k + 1} of {seeds}")
            predicted = self.predict(model, name, k).cpu()
            runs.append(scores(predicted, task.test_labels, task.n_classes))
            outcomes.append((predicted == task.test_labels).double().numpy())
        out = {f"eval/{name}/{key}": float(np.mean([r[key] for r in runs])) for key in runs[0]}
        outcome = np.stack(outcomes) if seeds > 1 else outcomes[0]
        self.last[name] = outcome
        out[f"eval/{name}/accuracy_se"] = standard_error(np.atleast_2d(outcome).mean(0))
        if seeds > 1:
            out[f"eval/{name}/accuracy_sd"] = mean_sd([r["accuracy"] for r in runs])[1]
        if name in self.random_init:
            m = margin(outcome, self.random_init[name])
            out.update(
                {f"eval/{name}/margin": m.value, f"eval/{name}/margin_low": m.low, f"eval/{name}/margin_high": m.high}
            )
        return out

    def random_init_and_majority(self, model: torch.nn.Module) -> dict[str, float]:
        """The baselines of every task: the same probe or fine-tuning of models of the same shape, freshly
        initialised from eval.probe.random_init_seeds seeds of their own (the same for every run of that shape; read
        from <cache_dir>/probe-random-init/ when an earlier run computed them; each fine-tuned from fine-tuning seed
        k): accuracy and macro_f1 as the mean over seeds, the accuracy's sd, the per-seed outcomes kept in
        self.random_init; and the majority class."""
        out = {}
        runs: dict[str, list] = {name: [] for name in self.encoded}
        for k in range(self.random_init_seeds):
            boundary(f"the tasks' random-init seed {k + 1} of {self.random_init_seeds}")
            torch.manual_seed(stream_seed("probe-random-init", self.seed, k))
            fresh = self.fresh_model(model)
            for name, task in self.encoded.items():
                path = None
                if self.cache_dir is not None:
                    how = [task.protocol, self.seed, READING]
                    how += self.finetune.settings() if task.protocol == "finetune" else [self.l2, self.max_length]
                    key = untrained_key(
                        fresh, probe=how, tokenizer=self.tokenizer_hash, examples=self.fingerprints[name]
                    )
                    path = self.cache_dir / "probe-random-init" / f"{key}.json"

                def read(p: Path, n=len(task.test_labels)):
                    labels = json.loads(p.read_text())
                    return torch.tensor(labels) if len(labels) == n else None

                predicted = cached(
                    path,
                    lambda name=name, k=k: self.predict(fresh, name, k).cpu(),
                    read,
                    lambda value, f: f.write(json.dumps(value.tolist()).encode()),
                )
                runs[name].append(
                    (
                        scores(predicted, task.test_labels, task.n_classes),
                        (predicted == task.test_labels).double().numpy(),
                    )
                )
        for name, task in self.encoded.items():
            self.random_init[name] = np.stack([o for _, o in runs[name]])
            mean, sd = mean_sd([s["accuracy"] for s, _ in runs[name]])
            out.update(
                {
                    f"eval/{name}/random_init_accuracy": mean,
                    f"eval/{name}/random_init_accuracy_sd": sd,
                    f"eval/{name}/random_init_macro_f1": mean_sd([s["macro_f1"] for s, _ in runs[name]])[0],
                }
            )
            out[f"eval/{name}/majority_accuracy"] = majority(task.train, task.test, task.n_classes)["accuracy"]
        return out

    def write(self, model: torch.nn.Module, name: str, seed: int) -> tuple[dict[str, torch.Tensor], list[str]]:
        """A copy of `model` fine-tuned on generation job `name` from fine-tuning seed `seed`, scored on its test
        examples (generation.score; the run's model is not changed)."""
        job, writer = self.written[name], self.copy(model)
        finetune_writer(writer, job.train, self.finetune, stream_seed("finetune-writer", self.seed, seed))
        return score(writer, job, self.tokenizer, *self.ids)

    def job_metrics(self, model: torch.nn.Module, name: str) -> dict[str, float]:
        """eval/<name>/<score> for each of generation.SCORES: the mean over eval.finetune.seeds fine-tuned copies and
        the test examples, its _se (over the examples), and beside the random-init baselines its margin with the
        paired bootstrap 95% interval (test examples, random-init seeds and fine-tuning seeds resampled); the loss's
        margin is random-init's loss minus the run's."""
        runs = []
        for k in range(self.finetune.seeds):
            if k:
                boundary(f"generation job {name}'s fine-tuning seed {k + 1} of {self.finetune.seeds}")
            found, predictions = self.write(model, name, k)
            runs.append(found)
            if not k:
                job = self.written[name]
                self.written_examples[name] = [
                    [i, job.source_texts[i], job.references[i], predictions[i]]
                    + [round(float(found[s][i]), 4) for s in ("exact_match", "token_f1")]
                    for i in range(min(WRITTEN_SHOWN, len(predictions)))
                ]
        out = {}
        for s in SCORES:
            values = torch.stack([r[s] for r in runs]).numpy()  # [fine-tuning seeds, n]
            outcome = -values if s == "loss" else values  # outcomes: the higher the better
            self.last[f"{name}/{s}"] = outcome
            out[f"eval/{name}/{s}"] = float(values.mean())
            out[f"eval/{name}/{s}_se"] = standard_error(values.mean(0))
            if f"{name}/{s}" in self.random_init:
                m = margin(outcome, self.random_init[f"{name}/{s}"])
                out.update({f"eval/{name}/{s}/margin{end}": v for end, v in zip(("", "_low", "_high"), astuple(m))})
        return out

    def writers_random_init(self, model: torch.nn.Module) -> dict[str, float]:
        """The generation jobs' baselines: models of the run's shape freshly initialised from the probe's
        random-init seeds (eval.probe.random_init_seeds), each fine-tuned from fine-tuning seed k and scored the same
        way (read from <cache_dir>/generation-random-init/ when an earlier run computed them): random_init_<score>
        and its sd over seeds; the per-seed outcomes kept in self.random_init."""
        runs: dict[str, list] = {name: [] for name in self.written}
        for k in range(self.random_init_seeds):
            boundary(f"the generation jobs' random-init seed {k + 1} of {self.random_init_seeds}")
            torch.manual_seed(stream_seed("probe-random-init", self.seed, k))
            fresh = self.fresh_model(model)
            for name in self.written:
                path = None
                if self.cache_dir is not None:
                    how = ["generation", self.seed, k, self.finetune.settings()]
                    key = untrained_key(
                        fresh, generation=how, tokenizer=self.tokenizer_hash, examples=self.fingerprints[name]
                    )
                    path = self.cache_dir / "generation-random-init" / f"{key}.json"

                def read(p: Path, n=len(self.written[name].sources)):
                    found = json.loads(p.read_text())
                    ok = set(found) == set(SCORES) and all(len(v) == n for v in found.values())
                    return {s: torch.tensor(v, dtype=torch.float64) for s, v in found.items()} if ok else None

                runs[name].append(
                    cached(
                        path,
                        lambda name=name, k=k: self.write(fresh, name, k)[0],
                        read,
                        lambda value, f: f.write(json.dumps({s: v.tolist() for s, v in value.items()}).encode()),
                    )
                )
        out = {}
        for name, found in runs.items():
            for s in SCORES:
                values = np.stack([r[s].numpy() for r in found])  # [seeds, n]
                self.random_init[f"{name}/{s}"] = -values if s == "loss" else values
                mean, sd = mean_sd(values.mean(1).tolist())
                out[f"eval/{name}/random_init_{s}"] = mean
                out[f"eval/{name}/random_init_{s}_sd"] = sd
        return out

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


@dataclass
class Encoded:
    """A task's examples as its protocol reads them: token ids and masks, class ids, and the examples."""

    train_inputs: tuple[torch.Tensor, torch.Tensor]
    train_labels: torch.Tensor
    test_inputs: tuple[torch.Tensor, torch.Tensor]
    test_labels: torch.Tensor
    n_classes: int
    train: Examples
    test: Examples
    protocol: str


def exam_interval(windows: dict[str, np.ndarray]) -> dict[str, float]:
    """The fixed exam's uncertainty from its per-window arrays (FixedExam.sums): eval/fixed/loss_low, _high (the
    stratified bootstrap 95% interval of eval/fixed/loss over the exam's windows) and _se (the replicates' sd,
    what a tuner's decision must exceed); with a unigram reference, eval/fixed/unigram_gap (the loss minus the
    training split's unigram on the same targets; below 0: more than word frequencies learned) with its paired
    interval, _low and _high. {} without a scored target."""
    return ratio_scores(windows, f"{FIXED}/loss")


def model_device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device
