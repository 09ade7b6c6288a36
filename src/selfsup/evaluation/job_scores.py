"""The generation jobs' part of the run's evaluation (JobScores, a mixin of Evaluation): writers, baselines."""

from __future__ import annotations

import hashlib
import json
from dataclasses import astuple
from pathlib import Path

import numpy as np
import torch

from selfsup.data.records import EvalError
from selfsup.evaluation.baselines import boundary, cached, untrained_key
from selfsup.evaluation.generation import NOT_A_WRITER, SCORES, WRITERS, finetune_writer, prepare, score
from selfsup.evaluation.infilling import INFILLING
from selfsup.evaluation.pairs import mean_sd
from selfsup.evaluation.simple import written_outcomes
from selfsup.evaluation.splits import held_out
from selfsup.evaluation.stats import margin, mean_interval, standard_error
from selfsup.loss import stream_seed

# a generation job's shown test examples (GenerationJob.examples_shown): its W&B Table's columns (after `step`) and
# evaluated.json's keys; random_init: what the random-init writer of seed 0 (fine-tuning seed 0) writes
WRITTEN_COLUMNS = ["example", "source", "reference", "prediction", "random_init", "exact_match", "token_f1"]


class JobScores:
    """Evaluation's generation jobs (eval.generation): each read and checked before training, prepared as the
    run's family writes it once the model exists, and scored by fine-tuned copies beside their random-init
    baselines. Reads the settings and state that Evaluation's __init__ and setup set (jobs, tasks, finetune, seed,
    random_init_seeds, tokenizer, cache_dir, tokenizer_hash, written, not_written, written_examples, fingerprints,
    last, random_init) and its fresh_model and copy."""

    def check_jobs(self, training_documents=None, sharded: bool = False) -> None:
        """Every job read, and refused (EvalError) under FSDP, beside a task of its name, or when a text is a
        pretraining document."""
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
            held_out(
                f"generation job {name}",
                "texts",
                "a job",
                (t for pair in train + test for t in pair),
                training_documents,
            )

    def setup_jobs(self, architecture: str, vocab, tokenizer, model_length: int) -> None:
        """Each job's examples as the run's family writes them (or why it cannot: not_written), and a hash of them
        (fingerprints)."""
        self.ids = (vocab.eos_id, vocab.bos_id, vocab.pad_id)
        for name, job in self.jobs.items():
            if architecture not in WRITERS:
                self.not_written[name] = NOT_A_WRITER
                continue
            train, test = job.load()
            length = min(self.finetune.max_length, model_length)
            self.written[name] = prepare(
                architecture, tokenizer, train, test, *self.ids, length, job.max_new_tokens, name=name
            )
            self.fingerprints[name] = hashlib.sha256(json.dumps([train, test, length, job.max_new_tokens]).encode())
            self.fingerprints[name] = self.fingerprints[name].hexdigest()
            w = self.written[name]
            self.simple_jobs[name] = written_outcomes(w.source_texts, w.references, [t for _, t in train])

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
                job, untrained = self.written[name], self.random_init_written.get(name) or {}
                self.written_examples[name] = [
                    [i, job.source_texts[i], job.references[i], predictions[i], untrained.get(i)]
                    + [round(float(found[s][i]), 4) for s in ("exact_match", "token_f1")]
                    for i in self.shown(name)
                ]
        return self.scored(name, runs)

    def scored(self, name: str, runs: list[dict[str, torch.Tensor]]) -> dict[str, float]:
        """eval/<name>/<score> of a job's runs ([n] scores per run: fine-tuning seeds), with its _se, its margin over
        the random-init baselines (self.random_init) and its differences with the simple baselines (simple_jobs);
        each score's outcomes kept in self.last (the loss's negated: the higher the better)."""
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
                out[f"eval/{name}/{s}/margin_examples"] = float(values.shape[-1])
            for b, found in (self.simple_jobs.get(name) or {}).items():  # the run against each simple baseline
                if s in found:
                    d = margin(outcome, found[s][None, :])
                    out.update({f"eval/{name}/{s}/vs_{b}{end}": v for end, v in zip(("", "_low", "_high"), astuple(d))})
        return out

    def shown(self, name: str) -> list[int]:
        """The test examples of job `name` shown with their outputs: examples_shown of them drawn by the eval seed
        (the same for every run of a sweep), in test order."""
        n = len(self.written[name].sources)
        rng = np.random.default_rng(stream_seed("shown-examples", self.seed))
        return sorted(rng.choice(n, size=min(self.jobs[name].examples_shown, n), replace=False).tolist())

    def writer_entry(self, fresh: torch.nn.Module, name: str, k: int) -> Path | None:
        """The cache entry of job `name`'s writer fine-tuned from the untrained `fresh` with fine-tuning seed k."""
        if self.cache_dir is None:
            return None
        settings = self.finetune.for_examples(len(self.written[name].train.inputs)).settings()
        how = ["generation", self.seed, k, settings, "predictions"]  # an entry holds the scores and what it wrote
        key = untrained_key(fresh, generation=how, tokenizer=self.tokenizer_hash, examples=self.fingerprints[name])
        return self.cache_dir / "generation-random-init" / f"{key}.json"

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
                path = self.writer_entry(fresh, name, k)
                n = len(self.written[name].sources)
                scores, predictions = cached(
                    path,
                    lambda name=name, k=k: self.write(fresh, name, k),
                    lambda p, n=n: read_written(p, n),
                    write_written,
                )
                runs[name].append(scores)
                if not k:
                    self.random_init_written[name] = {i: predictions[i] for i in self.shown(name)}
        out = {}
        for name, found in runs.items():
            out.update(self.scored_random_init(name, found))
            for b, scored in self.simple_jobs[name].items():  # copying the input, the most frequent target
                for s, outcomes in scored.items():
                    found = mean_interval(outcomes)
                    out.update(
                        {f"eval/{name}/{b}_{s}{end}": v for end, v in zip(("", "_low", "_high"), astuple(found))}
                    )
        return out

    def scored_random_init(self, name: str, found: list[dict[str, torch.Tensor]]) -> dict[str, float]:
        """eval/<name>/random_init_<score> and its sd over the random-init seeds' scores ([n] each); the per-seed
        outcomes kept in self.random_init."""
        out = {}
        for s in SCORES:
            values = np.stack([r[s].numpy() for r in found])  # [seeds, n]
            self.random_init[f"{name}/{s}"] = -values if s == "loss" else values
            mean, sd = mean_sd(values.mean(1).tolist())
            out[f"eval/{name}/random_init_{s}"] = mean
            out[f"eval/{name}/random_init_{s}_sd"] = sd
        return out

    def infilling_metrics(self, model: torch.nn.Module) -> dict[str, float]:
        """The infilling job's scores (selfsup.evaluation.infilling) as a generation job's: eval/infilling/<score>,
        its _se and its margin over untrained models of the run's shape scored the same way (the probe's
        random-init seeds, zero-shot; once a run, and read from <cache_dir>/infilling-random-init/ when an earlier
        run of the shape, layout and examples computed them), with the shown examples' writing."""
        job, name = self.infilling, INFILLING
        if not self.infilling_baselines:
            runs = []
            for k in range(self.random_init_seeds):
                boundary(f"the infilling job's random-init seed {k + 1} of {self.random_init_seeds}")
                torch.manual_seed(stream_seed("probe-random-init", self.seed, k))
                fresh = self.fresh_model(model)
                path, n = self.infilling_entry(fresh, k), len(job.references)
                scores, predictions = cached(
                    path, lambda fresh=fresh: job.scores(fresh), lambda p, n=n: read_written(p, n), write_written
                )
                runs.append(scores)
                if not k:
                    self.random_init_written[name] = {i: predictions[i] for i in self.shown_infills()}
            self.infilling_baselines = self.scored_random_init(name, runs)
        found, predictions = job.scores(model)
        untrained = self.random_init_written.get(name) or {}
        self.written_examples[name] = [
            [i, job.sources[i], job.references[i], predictions[i], untrained.get(i)]
            + [round(float(found[s][i]), 4) for s in ("exact_match", "token_f1")]
            for i in self.shown_infills()
        ]
        return {**self.scored(name, [found]), **self.infilling_baselines}

    def infilling_entry(self, fresh: torch.nn.Module, k: int) -> Path | None:
        """The cache entry of the infilling job's scores on the untrained `fresh` of random-init seed k: the same for
        every run of the shape, layout and examples."""
        if self.cache_dir is None:
            return None
        how = ["infilling", self.seed, k, self.infilling.layout]
        key = untrained_key(fresh, infilling=how, tokenizer=self.tokenizer_hash, examples=self.infilling.fingerprint)
        return self.cache_dir / "infilling-random-init" / f"{key}.json"

    def shown_infills(self) -> list[int]:
        n = len(self.infilling.references)
        rng = np.random.default_rng(stream_seed("shown-examples", self.seed))
        return sorted(rng.choice(n, size=min(self.infilling.examples_shown, n), replace=False).tolist())


def read_written(path: Path, n: int):
    """A cache entry of scores of n written examples and what was written, or None where it holds anything else."""
    found = json.loads(path.read_text())
    ok = set(found) == {*SCORES, "predictions"} and all(len(v) == n for v in found.values())
    if not ok or not all(isinstance(t, str) for t in found["predictions"]):
        return None
    return {s: torch.tensor(found[s], dtype=torch.float64) for s in SCORES}, found["predictions"]


def write_written(value, f) -> None:
    f.write(json.dumps({**{s: v.tolist() for s, v in value[0].items()}, "predictions": value[1]}).encode())


def written_lines(written_examples: dict[str, list[list]], width: int = 100) -> list[str]:
    """The console's short view of each job's shown examples: its first one, each text cut to fit `width`."""

    def cut(text, room: int) -> str:
        text = repr(" ".join(str(text).split())) if text is not None else "-"
        return text if len(text) <= room else text[: room - 4] + "...'"

    lines = []
    for name, rows in written_examples.items():
        if not rows:
            continue
        i, source, reference, prediction, untrained = rows[0][:5]
        lines.append(f"  {name}, test example {i} (1 of {len(rows)} shown in evaluated.json):")
        for label, text in (("source", source), ("reference", reference), ("this run", prediction)):
            lines.append(f"    {label + ':':12} {cut(text, width - 17)}")
        lines.append(f"    {'random-init:':12} {cut(untrained, width - 17)}")
    return lines
