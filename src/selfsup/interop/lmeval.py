"""lm-evaluation-harness on a run's export, beside the lab's own scores: `selfsup-eval RUN_OR_SWEEP_DIR
lm_eval.tasks=[...]`.

    selfsup-eval SWEEP 'lm_eval.tasks=[lambada_openai,hellaswag,arc_easy,blimp]'     lm-eval's standard tasks
    selfsup-eval SWEEP 'lm_eval.tasks=[my_task]' lm_eval.include_path=tasks/          task YAMLs of your own
    selfsup-eval SWEEP 'lm_eval.tasks=[arc_easy]' lm_eval.num_fewshot=5 lm_eval.limit=200

Each run's last weights (checkpoints/last.ckpt, what selfsup-eval scores) are exported (selfsup.interop.export) to a
temporary folder and scored by `lm_eval.simple_evaluate` with its `hf` model: decoders by its causal backend
(GPT-2), encoder-decoders (and architecture=t5) by its seq2seq backend (the context read by the encoder, the
continuation scored by the decoder). lm-eval has no backend for encoders: an encoder run is said in one line and
skipped. The settings are lm-eval's own (tasks, num_fewshot, limit, batch_size, include_path, bootstrap_iters),
passed as lm-eval names them.

The same tasks run on `random_init_seeds` untrained models of the run's shape (initialised as the probe's
random-init baselines, exported the same way), cached under `<data.cache_dir>/lm-eval-random-init/` (the same for
every run of a shape: a seed sweep computes them once). Every metric lm-eval reports becomes

    eval/lm_eval/<task>/<metric>               lm-eval's value (a filter other than `none` is appended: acc_flexible)
    eval/lm_eval/<task>/<metric>_stderr        lm-eval's own standard error
    eval/lm_eval/<task>/random_init_<metric>   the mean over the random-init models, _sd their sd over seeds
    eval/lm_eval/<task>/chance_<metric>        a multiple-choice task's acc and acc_norm by a random pick: the mean
                                               over documents of 1 / the document's number of choices
    eval/lm_eval/<task>/<metric>/margin        the run's minus random-init's (random-init's minus the run's where
                                               lm-eval says lower is better), _low and _high its 95% interval:
                                               for a metric that is the mean of per-document values (acc,
                                               acc_norm, exact_match) the lab's paired bootstrap over documents
                                               and random-init seeds (selfsup.evaluation.stats.margin; the
                                               per-document outcomes kept for the verdict's comparisons); for a
                                               loglikelihood task's perplexity (exp of minus the mean
                                               log-likelihood) the same on the log-likelihoods: the margin is
                                               log(random-init's perplexity) - log(the run's), in nats; for the
                                               others (word_perplexity, bits_per_byte: weighted by length) the
                                               normal interval of lm-eval's stderr and of the random-init mean's
                                               (their sd over seeds / sqrt(seeds))
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from selfsup.common.names import DECODER, ENCODER_DECODER
from selfsup.errors import UserError
from selfsup.evaluation.baselines import cached, untrained_key
from selfsup.evaluation.stats import margin
from selfsup.interop.export import export_model, exporter
from selfsup.interop.pretrained import Pretrained
from selfsup.loss import stream_seed

PREFIX = "eval/lm_eval"
INSTALL = "pip install -e '.[lmeval]'"  # the extra pins lm-eval (pyproject.toml)
BACKENDS = {DECODER: "causal", ENCODER_DECODER: "seq2seq"}
NOT_SCORED = "lm-eval scores decoders (hf, causal) and encoder-decoders (hf, seq2seq); it has no backend for encoders"
GENERATES = "generate_until"
Z95 = 1.959963984540054
MANAGERS: dict[tuple, Any] = {}  # lm-eval's TaskManager per include_path

__all__ = ["LMEval", "combine", "scores", "write_tasks"]


def lm_eval_module():
    """The lm_eval package, or one line saying how to install it."""
    try:
        import lm_eval
    except ImportError:
        raise UserError(f"lm-eval is not installed: {INSTALL} (or pip install 'lm-eval>=0.4.13,<0.5')") from None
    return lm_eval


@dataclass
class LMEval:
    """lm-evaluation-harness settings (conf/lm_eval.yaml), named as lm-eval names them: tasks (task, group or tag
    names), num_fewshot, limit (documents per task, or a fraction), batch_size, include_path (folders of task YAMLs
    of your own), bootstrap_iters (lm-eval's bootstrap of the stderr of metrics that are not means); device (None:
    cuda when there is one); random_init_seeds (untrained models of the run's shape scored the same way)."""

    tasks: list[str] = field(default_factory=list)
    num_fewshot: int | None = None
    limit: float | None = None
    batch_size: int | str = 8
    include_path: list[str] | None = None
    bootstrap_iters: int = 1000
    device: str | None = None
    random_init_seeds: int = 3
    seed: int = 0
    _manager: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.tasks = [str(t) for t in (self.tasks or [])]
        if isinstance(self.include_path, str):
            self.include_path = [self.include_path]
        self.include_path = [str(Path(p).expanduser()) for p in (self.include_path or [])]

    # ---------------------------------------------------------------------------------------- before any run
    def check(self) -> None:
        """Every setting and task name: UserError (one line) for anything to fix."""
        if not self.tasks:
            raise UserError(
                "lm_eval.tasks is empty: name lm-eval tasks, e.g. 'lm_eval.tasks=[lambada_openai,hellaswag]'"
            )
        for key, value, least in (
            ("random_init_seeds", self.random_init_seeds, 2),
            ("bootstrap_iters", self.bootstrap_iters, 0),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise UserError(f"lm_eval.{key}={value} must be a whole number >= {least}")
        if self.num_fewshot is not None and (not isinstance(self.num_fewshot, int) or self.num_fewshot < 0):
            raise UserError(
                f"lm_eval.num_fewshot={self.num_fewshot} must be a whole number >= 0, or null (each task's own)"
            )
        if self.limit is not None and not (isinstance(self.limit, (int, float)) and self.limit > 0):
            raise UserError(
                f"lm_eval.limit={self.limit} must be a number of documents (>= 1), a fraction (0-1), or null"
            )
        if not (self.batch_size == "auto" or (isinstance(self.batch_size, int) and self.batch_size >= 1)):
            raise UserError(f"lm_eval.batch_size={self.batch_size} must be a whole number >= 1, or auto")
        for folder in self.include_path:
            if not Path(folder).is_dir():
                raise UserError(f"lm_eval.include_path: {folder} is not a folder: pass the folder of your task YAMLs")
        manager = self.manager()
        known = set(manager.all_tasks)
        for name in self.tasks:
            if name not in known:
                unreadable(self.include_path)
                close = sorted(t for t in known if name.lower() in t.lower() or t.lower() in name.lower())[:8]
                hint = f"close names: {', '.join(close)}" if close else "`lm_eval ls tasks` lists lm-eval's tasks"
                where = f" or in {', '.join(self.include_path)}" if self.include_path else ""
                raise UserError(
                    f"lm_eval.tasks: {name} is not an lm-eval task{where} ({hint}); a task YAML of your own: "
                    f"lm_eval.include_path=FOLDER"
                )

    def manager(self):
        """lm-eval's TaskManager over its own tasks and include_path (built once per process and include_path: it
        indexes ~15k YAMLs in ~7 s)."""
        if self._manager is None:
            lm_eval_module()
            from lm_eval.tasks import TaskManager

            key = tuple(self.include_path)
            if key not in MANAGERS:
                with quiet():
                    MANAGERS[key] = TaskManager(include_path=self.include_path or None)
            self._manager = MANAGERS[key]
        return self._manager

    def generating(self) -> list[str]:
        """The tasks (or a group's or tag's tasks) whose documents are scored on generated text (generate_until)."""
        index, found = self.manager().task_index, []

        def output_type(name: str, depth: int = 0) -> set[str]:
            entry = index.get(name)
            if entry is None or depth > 8:
                return set()
            cfg = entry.cfg or {}
            if cfg.get("output_type"):
                return {cfg["output_type"]}
            if cfg.get("include") and entry.yaml_path is not None:
                import yaml

                try:
                    included = yaml.safe_load((entry.yaml_path.parent / cfg["include"]).read_text()) or {}
                except (OSError, yaml.YAMLError):
                    return set()
                return (
                    {included["output_type"]} if isinstance(included, dict) and included.get("output_type") else set()
                )
            members = cfg.get("task") if isinstance(cfg.get("task"), list) else []
            members += [n for n, e in index.items() if name in (getattr(e, "tags", None) or ())]
            return set().union(*[output_type(m if isinstance(m, str) else "", depth + 1) for m in members], set())

        for name in self.tasks:
            if GENERATES in output_type(name):
                found.append(name)
        return found

    def unsupported(self, architecture: str) -> str | None:
        """Why lm-eval cannot score a run of this architecture (one line), or None."""
        if architecture in BACKENDS:
            return None
        generating = self.generating()
        if generating:
            return (
                f"{generating[0]} needs generated text (output_type {GENERATES}), which an {architecture} cannot write; "
                f"{NOT_SCORED}"
            )
        return NOT_SCORED

    # ---------------------------------------------------------------------------------------- one run
    def evaluate(self, p: Pretrained, cache_dir: Path | None, say=print) -> tuple[dict, dict, dict]:
        """(metrics, outcomes, record) of the model `p` and its random-init baselines (see the module's doc)."""
        exporter(p.model, p.architecture)  # exportable (checked before any run too)
        say(f"lm-eval on the run's weights: {', '.join(self.tasks)}")
        trained = self.score(p)
        runs = []
        tokenizer = hashlib.sha256(p.tokenizer.to_str().encode()).hexdigest()
        examples = {task: s["examples"] for task, s in trained.items()}
        for k in range(self.random_init_seeds):
            torch.manual_seed(stream_seed("probe-random-init", self.seed, k))
            fresh = p.model.config.build(p.model.vocab_size, p.model.max_len).eval()
            path = None
            if cache_dir is not None:
                how = [self.settings(), BACKENDS[p.architecture], lm_eval_version()]
                key = untrained_key(fresh, lm_eval=how, tokenizer=tokenizer, examples=examples)
                path = Path(cache_dir) / "lm-eval-random-init" / f"{key}.json"
            say(
                f"lm-eval on random-init seed {k + 1} of {self.random_init_seeds}"
                + (" (cached)" if path and path.is_file() else "")
            )
            runs.append(
                cached(
                    path,
                    lambda fresh=fresh: self.score(dataclasses.replace(p, model=fresh)),
                    lambda f: _complete(json.loads(f.read_text()), trained),
                    lambda value, f: f.write(json.dumps(value).encode()),
                )
            )
        metrics, outcomes = combine(trained, runs)
        record = {"lm_eval": {**self.settings(), "version": lm_eval_version(), "backend": BACKENDS[p.architecture]}}
        # per task: lm-eval's settings and version, and the hash of the documents, prompts and targets it scored
        shared = {k: v for k, v in record["lm_eval"].items() if k != "tasks"}
        record["settings"] = {f"{PREFIX}/{task}": {**shared, "examples": examples[task]} for task in trained}
        return metrics, outcomes, record

    def settings(self) -> dict:
        return {
            "tasks": list(self.tasks),
            "num_fewshot": self.num_fewshot,
            "limit": self.limit,
            "batch_size": self.batch_size,
            "include_path": list(self.include_path),
            "bootstrap_iters": self.bootstrap_iters,
            "random_init_seeds": self.random_init_seeds,
        }

    def score(self, p: Pretrained) -> dict:
        """lm-eval's results on the export of `p`, per task (scores())."""
        lm_eval = lm_eval_module()
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        with tempfile.TemporaryDirectory(prefix="selfsup-lm-eval-") as folder, quiet():
            export_model(p, Path(folder) / "hf")
            try:
                results = lm_eval.simple_evaluate(
                    model="hf",
                    model_args={"pretrained": str(Path(folder) / "hf"), "backend": BACKENDS[p.architecture]},
                    tasks=list(self.tasks),
                    num_fewshot=self.num_fewshot,
                    limit=self.limit,
                    batch_size=self.batch_size,
                    device=device,
                    bootstrap_iters=self.bootstrap_iters,
                    log_samples=True,
                    task_manager=self.manager(),
                )
            except AssertionError as err:  # lm-eval's hf model asserts that each target fits the model's length
                if err.__traceback__ is None or _innermost(err.__traceback__) != "_loglikelihood_tokens":
                    raise
                traceback.clear_frames(err.__traceback__)  # lm-eval's progress bar ends its line before ours
                raise UserError(
                    f"lm-eval cannot score a target longer than the model's {p.model.max_len} tokens (its hf model "
                    f"asserts len(continuation) <= max_length) in {', '.join(self.tasks)}: use tasks with shorter "
                    f"targets, or models trained with a longer data.seq_len"
                ) from None
        return scores(results)


def _innermost(tb) -> str:
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_name


def lm_eval_version() -> str:
    from importlib.metadata import version

    return version("lm_eval")


@contextlib.contextmanager
def quiet():
    """lm-eval's, datasets' and transformers' INFO logging and warnings held back (its progress bars stay)."""
    names = ["lm_eval", "datasets", "transformers", "accelerate", "evaluate"]
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def metric_name(key: str) -> tuple[str, str, str] | None:
    """lm-eval's result key `acc,none` -> (acc, none, acc); `exact_match,flexible-extract` -> (..., exact_match_
    flexible-extract); None for a stderr or a non-metric entry."""
    if "," not in key:
        return None
    metric, filtered = key.split(",", 1)
    if metric.endswith("_stderr"):
        return None
    return metric, filtered, metric if filtered == "none" else f"{metric}_{filtered}"


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def scores(results: dict) -> dict:
    """Per task (and group) of lm-eval's results: {"metrics": {name: {value, stderr, higher, docs}}, "examples",
    "n"}: docs are the per-document values in doc_id order where they are numbers (None else); examples a hash of
    the documents, prompts and targets scored."""
    out = {}
    samples = results.get("samples") or {}
    for task, entry in results["results"].items():
        higher = (results.get("higher_is_better") or {}).get(task) or {}
        found, docs_of = {}, samples.get(task) or []
        for key, value in entry.items():
            named = metric_name(key)
            if named is None or _number(value) is None:
                continue
            metric, filtered, name = named
            picked = sorted((s for s in docs_of if s.get("filter", "none") == filtered), key=lambda s: s["doc_id"])
            docs = [_number(s.get(metric)) for s in picked]
            found[name] = {
                "value": float(value),
                "stderr": _number(entry.get(f"{metric}_stderr,{filtered}")),
                "higher": higher.get(metric, True) is not False,
                "docs": docs if docs and all(d is not None for d in docs) else None,
            }
        hashes = sorted({(s["doc_id"], s.get("doc_hash"), s.get("prompt_hash"), s.get("target_hash")) for s in docs_of})
        out[task] = {
            "metrics": found,
            "examples": hashlib.sha256(json.dumps(hashes).encode()).hexdigest()[:16],
            "n": len(hashes),
            "chance": chance(results, task, docs_of),
        }
    return out


def chance(results: dict, task: str, docs_of: list[dict]) -> float | None:
    """A multiple-choice task's chance level: the mean over its documents of 1 / its number of choices (each choice
    one request: a sample's `arguments`), what picking a choice at random scores on acc and acc_norm; None for
    another output type."""
    config = (results.get("configs") or {}).get(task) or {}
    picked = [s for s in docs_of if s.get("filter", "none") == "none" and s.get("arguments")]
    if config.get("output_type") != "multiple_choice" or not picked:
        return None
    return float(np.mean([1.0 / len(s["arguments"]) for s in picked]))


def _complete(found: dict, trained: dict) -> dict | None:
    """A cached random-init entry when it holds every task and metric of the trained model's results."""
    ok = all(t in found and set(s["metrics"]) <= set(found[t]["metrics"]) for t, s in trained.items())
    return found if ok else None


def per_document(m: dict) -> str | None:
    """How a metric is made of its per-document values: "mean" (acc, acc_norm, exact_match), "perplexity" (exp of
    minus the mean log-likelihood: lm-eval's loglikelihood tasks), or None (weighted: word_perplexity, ...)."""
    docs = m["docs"]
    if docs is None:
        return None
    mean, value = float(np.mean(docs)), m["value"]
    if abs(mean - value) <= 1e-9 * max(1.0, abs(value)):
        return "mean"
    if value > 0 and abs(-mean - math.log(value)) <= 1e-9 * max(1.0, abs(mean)):
        return "perplexity"
    return None


def combine(trained: dict, runs: list[dict]) -> tuple[dict, dict]:
    """(metrics, outcomes) of the trained model's results beside its random-init runs' (the module's doc)."""
    metrics, outcomes = {}, {}
    for task, s in trained.items():
        for name, m in s["metrics"].items():
            key = f"{PREFIX}/{task}/{name}"
            base = [r[task]["metrics"][name] for r in runs]
            values = [b["value"] for b in base]
            metrics[key] = m["value"]
            if s.get("chance") is not None and name.split("_")[0] == "acc":  # acc, acc_norm (acc_<filter>)
                metrics[f"{PREFIX}/{task}/chance_{name}"] = s["chance"]
            if m["stderr"] is not None:
                metrics[f"{key}_stderr"] = m["stderr"]
            mean = float(np.mean(values))
            metrics[f"{PREFIX}/{task}/random_init_{name}"] = mean
            metrics[f"{PREFIX}/{task}/random_init_{name}_sd"] = float(np.std(values, ddof=1))
            sign = 1.0 if m["higher"] else -1.0
            kind = per_document(m)
            if kind is not None and all(per_document(b) == kind and len(b["docs"]) == len(m["docs"]) for b in base):
                # a perplexity's documents are log-likelihoods (the higher the better): its margin is
                # log(random-init's perplexity) - log(the run's)
                sign = 1.0 if kind == "perplexity" else sign
                run, random_init = sign * np.asarray(m["docs"]), sign * np.asarray([b["docs"] for b in base])
                found = margin(run, random_init)
                value, low, high = found.value, found.low, found.high
                outcomes[key] = run
                outcomes[f"{key}|random_init"] = random_init
                outcomes[f"{key}|examples"] = np.array(s["examples"])
            elif m["stderr"] is not None:
                value = sign * (m["value"] - mean)
                se = math.sqrt(m["stderr"] ** 2 + float(np.var(values, ddof=1)) / len(values))
                low, high = value - Z95 * se, value + Z95 * se
            else:
                continue  # no stderr (lm-eval's N/A): no interval, so no margin
            metrics.update({f"{key}/margin": value, f"{key}/margin_low": low, f"{key}/margin_high": high})
            if m.get("docs") is not None:
                metrics[f"{key}/margin_examples"] = float(len(m["docs"]))
    return metrics, outcomes


# ------------------------------------------------------------------------------------------ the lab's local tasks
TASK_YAML = {
    "selfsup_pairs": (
        "# BLiMP's layout over the lab's held-out minimal pairs (selfsup.evaluation.pair_sets.builtin_pairs, replaced_1):\n"
        "# each pair's two sentences as the choices of an empty context, the grammatical one the target\n"
        'task: selfsup_pairs\n{data}output_type: multiple_choice\ndoc_to_text: ""\n'
        'doc_to_choice: "{{{{[sentence_good, sentence_bad]}}}}"\ndoc_to_target: 0\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    ),
    "selfsup_last_word": (
        "# LAMBADA's layout over the lab's held-out docstring sentences (selfsup.evaluation.builtin.probe_sentences):\n"
        "# the sentence without its last word as the context, the last word the target\n"
        'task: selfsup_last_word\n{data}output_type: loglikelihood\ndoc_to_text: "{{{{context}}}}"\n'
        "doc_to_target: \"{{{{' ' + word}}}}\"\nmetric_list:\n"
        "  - metric: perplexity\n    aggregation: perplexity\n    higher_is_better: false\n"
        "  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
    ),
}
TASK_DATA = "dataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {path}\ntest_split: test\n"


def unreadable(folders: list) -> None:
    """UserError naming the first task YAML under `folders` that cannot be parsed (lm-eval skips such a file with a
    log line, and its task is then unknown). lm-eval's own tags (`!function`) are accepted."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.yaml")):
            try:
                yaml.load(path.read_text(), Loader=Loader)  # noqa: S506 - a SafeLoader
            except (yaml.YAMLError, UnicodeDecodeError) as err:
                where = getattr(err, "problem_mark", None)
                at = f"line {where.line + 1}: " if where is not None else ""
                problem = getattr(err, "problem", None) or str(err).splitlines()[0]
                raise UserError(
                    f"lm_eval.include_path: {path} cannot be parsed as YAML ({at}{problem}): lm-eval skips it, so its "
                    f"task is unknown; fix the file"
                ) from None


def write_tasks(folder: str | Path, n: int = 500) -> list[Path]:
    """Two lm-eval tasks over the lab's held-out text (never in the built-in corpus), as task YAMLs over JSON files
    in `folder` (lm_eval.include_path=[folder], or lm-eval's own --include_path): selfsup_pairs (BLiMP's layout, n
    minimal pairs: acc) and selfsup_last_word (LAMBADA's, n sentences: perplexity, acc). Returns the files written."""
    from selfsup.evaluation.builtin import PLAIN, probe_sentences
    from selfsup.evaluation.pair_sets import builtin_pairs

    folder = Path(folder).expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    pairs = builtin_pairs(max_pairs=n, types=["replaced_1"])
    words = [s.rstrip(".").split() for s in probe_sentences() if s.endswith(".")]
    rows = {
        "selfsup_pairs": [{"sentence_good": g, "sentence_bad": b} for g, b in zip(pairs.good, pairs.bad)],
        "selfsup_last_word": [{"context": " ".join(w[:-1]), "word": w[-1]} for w in words if PLAIN.match(w[-1])][:n],
    }
    written = []
    for name, found in rows.items():
        data = folder / f"{name}.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in found))
        (folder / f"{name}.yaml").write_text(TASK_YAML[name].format(data=TASK_DATA.format(path=data)))
        written += [folder / f"{name}.yaml", data]
    return written


def main(argv: list[str] | None = None) -> None:
    """python -m selfsup.lmeval tasks FOLDER: write the lab's two local lm-eval tasks (write_tasks) into FOLDER."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "tasks":
        print(
            "usage: python -m selfsup.lmeval tasks FOLDER   (writes selfsup_pairs and selfsup_last_word)",
            file=sys.stderr,
        )
        raise SystemExit(2)
    try:
        written = write_tasks(args[1])
    except OSError as err:
        blocker = next((p for p in [Path(args[1]), *Path(args[1]).parents] if p.exists() and not p.is_dir()), None)
        why = f"{blocker} is a file" if blocker is not None else err.strerror
        print(f"error: cannot write the tasks into {args[1]} ({why}): pass a writable folder", file=sys.stderr)
        raise SystemExit(2) from None
    print(
        f"wrote {', '.join(p.name for p in written)} to {written[0].parent}: lm_eval.include_path=[{written[0].parent}]"
    )


if __name__ == "__main__":
    main()
