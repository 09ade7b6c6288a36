"""The tasks' part of the run's evaluation (TaskScores, a mixin of Evaluation): probes and their baselines."""

from __future__ import annotations

import hashlib
import json
from dataclasses import astuple, dataclass
from pathlib import Path

import numpy as np
import torch

from selfsup.evaluation.baselines import boundary, cached, untrained_key
from selfsup.evaluation.pairs import mean_sd
from selfsup.evaluation.probe import (
    READING,
    confusion,
    encode,
    features,
    finetune,
    linear_probe,
    majority,
    per_class,
    scores,
)
from selfsup.evaluation.simple import NAME as SIMPLE
from selfsup.evaluation.simple import simple_key, tfidf_predictions
from selfsup.evaluation.splits import held_out
from selfsup.evaluation.stats import margin, mean_interval, standard_error
from selfsup.evaluation.tasks import Examples, Task, parts
from selfsup.loss import stream_seed


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


class TaskScores:
    """Evaluation's tasks (eval.tasks): each read and checked before training, encoded as its protocol reads
    them once the model exists, and scored by the linear probe or fine-tuning beside its random-init and majority
    baselines. Reads the settings and state that Evaluation's __init__ and setup set (tasks, finetune, l2, seed,
    random_init_seeds, max_length, cache_dir, tokenizer_hash, encoded, fingerprints, last, random_init) and its
    fresh_model and copy."""

    def check_tasks(self, training_documents=None) -> None:
        """Every task read, and refused (EvalError) when an example is a pretraining document."""
        for name, task in self.tasks.items():
            train, test = task.load()
            held_out(
                f"task {name}",
                "examples",
                "a probe",
                (p for t in train.texts + test.texts for p in parts(t)),
                training_documents,
            )

    def setup_tasks(self, architecture: str, vocab, tokenizer, model_length: int) -> None:
        """Each task's examples encoded as its protocol reads them, and a hash of them (fingerprints)."""
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

    def protocol_of(self, task: Task) -> str:
        """A task's protocol: its own, else eval.probe.protocol."""
        return task.protocol or self.protocol

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
        outcomes, runs, confusions = [], [], []
        for k in range(seeds):
            if k:
                boundary(f"task {name}'s fine-tuning seed {k + 1} of {seeds}")
            predicted = self.predict(model, name, k).cpu()
            runs.append(scores(predicted, task.test_labels, task.n_classes))
            outcomes.append((predicted == task.test_labels).double().numpy())
            confusions.append(confusion(predicted, task.test_labels, task.n_classes))
        self.per_class[name] = per_class(confusions, self.tasks[name].classes)
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
            out[f"eval/{name}/margin_examples"] = float(np.shape(outcome)[-1])
        if name in self.simple:  # the run against the simple baseline, on the same test examples
            d = margin(outcome, self.simple[name][None, :])
            out.update(
                {f"eval/{name}/vs_tfidf{end}": v for end, v in zip(("", "_low", "_high"), (d.value, d.low, d.high))}
            )
        return out

    def task_entry(self, fresh: torch.nn.Module, name: str) -> Path | None:
        """The cache entry of task `name`'s baseline on the untrained model `fresh` (None: no cache_dir)."""
        if self.cache_dir is None:
            return None
        task = self.encoded[name]
        how = [task.protocol, self.seed, READING]
        how += (
            self.finetune.for_examples(len(task.train_labels)).settings()
            if task.protocol == "finetune"
            else [self.l2, self.max_length]
        )
        key = untrained_key(fresh, probe=how, tokenizer=self.tokenizer_hash, examples=self.fingerprints[name])
        return self.cache_dir / "probe-random-init" / f"{key}.json"

    def simple_outcomes(self, name: str) -> np.ndarray:
        """Task `name`'s simple baseline (selfsup.evaluation.simple) per test example, 1 right, 0 wrong: it reads
        no model, so computed once per task's examples (<cache_dir>/simple/)."""
        task = self.encoded[name]

        def read(p: Path, n=len(task.test_labels)):
            labels = json.loads(p.read_text())
            return np.asarray(labels) if len(labels) == n else None

        predicted = cached(
            None
            if self.cache_dir is None
            else self.cache_dir / "simple" / f"{simple_key(self.fingerprints[name])}.json",
            lambda: tfidf_predictions(task.train, task.test),
            read,
            lambda value, f: f.write(json.dumps(np.asarray(value).tolist()).encode()),
        )
        return (np.asarray(predicted) == task.test_labels.numpy()).astype(float)

    def random_init_and_majority(self, model: torch.nn.Module) -> dict[str, float]:
        """The baselines of every task: the same probe or fine-tuning of models of the same shape, freshly
        initialised from eval.probe.random_init_seeds seeds of their own (the same for every run of that shape; read
        from <cache_dir>/probe-random-init/ when an earlier run computed them; each fine-tuned from fine-tuning seed
        k): accuracy and macro_f1 as the mean over seeds, the accuracy's sd, the per-seed outcomes kept in
        self.random_init; the majority class; and the simple baseline (selfsup.evaluation.simple), its outcomes
        kept in self.simple."""
        out = {}
        runs: dict[str, list] = {name: [] for name in self.encoded}
        for k in range(self.random_init_seeds):
            boundary(f"the tasks' random-init seed {k + 1} of {self.random_init_seeds}")
            torch.manual_seed(stream_seed("probe-random-init", self.seed, k))
            fresh = self.fresh_model(model)
            for name, task in self.encoded.items():
                path = self.task_entry(fresh, name)

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
            boundary(f"task {name}'s {SIMPLE}")
            self.simple[name] = self.simple_outcomes(name)
            found = mean_interval(self.simple[name])
            out.update({f"eval/{name}/tfidf_accuracy{end}": v for end, v in zip(("", "_low", "_high"), astuple(found))})
        return out
