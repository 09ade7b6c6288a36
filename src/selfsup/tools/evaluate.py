"""selfsup-eval: score finished runs on further tasks and protocols without training again.

    selfsup-eval RUN_OR_SWEEP_DIR [eval overrides]
    selfsup-eval outputs/multirun/<date>/<time>                  the downstream jobs (conf/eval/jobs.yaml): the
                                                                 built-in sentence-pair task and the probe's task,
                                                                 and the generation jobs continuation and
                                                                 docstring_name (decoders and encoder-decoders),
                                                                 fine-tuned, beside fine-tuned random-init models
    selfsup-eval SWEEP '+eval.generation.xsum={source: hf_dataset, hf_name: EdinburghNLP/xsum,
        source_field: document, target_field: summary}'                                 a summarisation set too
    selfsup-eval SWEEP '+eval.tasks.rte={source: text_files, paths: [rte/train.jsonl],
        test_paths: [rte/validation.jsonl], text_fields: [sentence1, sentence2]}'     a GLUE-layout task too
    selfsup-eval SWEEP eval.finetune.steps=600 '~eval.tasks.replaced_word'
    selfsup-eval SWEEP eval=default                              the training-time evaluation again (exam, pairs...)
    selfsup-eval SWEEP --plan                                    the plan alone: each run's parts, what the cache
                                                                 holds, about how long (a warm-up), then stop
    selfsup-eval SWEEP 'lm_eval.tasks=[lambada_openai,hellaswag]'   lm-evaluation-harness tasks on each run's export,
                                                                 beside random-init models (selfsup.interop.lmeval; lm_eval.*
                                                                 alone runs lm-eval alone; pip install -e '.[lmeval]')

For each run (a run dir, or each job of a sweep dir that finished training; the others are named in a
`left out:` line with why: failed, preempted, still training): its recorded config with its `eval` replaced by the one
composed here (the `eval` group's option `jobs` unless `eval=...` names another, and the overrides, which must be
eval settings); its data prepared as when it trained (the token cache reused; the tasks checked against its
pretraining documents); the weights it ended with (checkpoints/last.ckpt, what its own scores were measured on);
the evaluation run (selfsup.evaluation.Evaluation); its scores written to <run_dir>/evaluated.json and its
per-example outcomes to <run_dir>/evaluated_outcomes.npz, files of their own (summary.json is never touched; a
later selfsup-eval replaces the scores of the tasks it evaluates again and keeps the others). The end prints the
table of every run's scores and the verdict over them (selfsup.results.verdict, the same rules as after training);
selfsup-report on the folder shows them beside the runs' own.

Every setting, task file and checkpoint of every run is checked before any run is evaluated: bad input is one
line and exit status 2 with nothing written. Then the plan: per run its parts, their fine-tunes and seeds, which
random-init baselines the cache holds (or an earlier run will have written) and about how long it will take,
measured by a short warm-up on this machine (selfsup.evaluation.plan), and the whole; `--plan` stops there.
While a run is evaluated a line says each part as it starts, and a part under way again every 20 s with the
time left of the estimate.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from omegaconf import DictConfig, OmegaConf

from selfsup.common.names import (
    ERROR,
    EVALUATED,
    EVALUATED_OUTCOMES,
    LAST_CHECKPOINT,
    RECORDED_CONFIG,
    SUMMARY,
    RunSummary,
    override_key,
    write_json,
)
from selfsup.errors import UserError
from selfsup.results.groups import with_margins
from selfsup.results.settings import part_of
from selfsup.results.summary import evaluated_rows, read_evaluated

if TYPE_CHECKING:
    pass

USAGE = (
    "usage: selfsup-eval RUN_OR_SWEEP_DIR [--plan] [eval overrides, e.g. eval.finetune.steps=600 "
    "'+eval.tasks.NAME={...}'] [lm_eval overrides, e.g. 'lm_eval.tasks=[hellaswag]']"
)
DEFAULT_EVAL = "jobs"


def run_dirs(path: Path) -> tuple[list[Path], list[str]]:
    """(the run dir `path`, or the job dirs of the sweep dir `path` that finished training, in job order; each job
    dir left out with why: `SWEEP/2 (failed: ...)`, `(preempted)`, `(no summary.json: still training, ...)`)."""
    if not path.exists():
        raise UserError(f"{path} does not exist: pass a run dir (outputs/<date>/<time>) or a sweep dir")
    if not path.is_dir():
        raise UserError(f"{path} is a file: pass a run dir (outputs/<date>/<time>) or a sweep dir")
    if any((path / name).is_file() for name in (SUMMARY, ERROR, RECORDED_CONFIG)):
        return [path], []
    jobs = sorted(
        (p for p in path.iterdir() if p.is_dir() and any((p / n).is_file() for n in (SUMMARY, ERROR, RECORDED_CONFIG))),
        key=lambda p: (len(p.name), p.name),
    )
    if not jobs:
        raise UserError(f"{path} holds no runs (no summary.json in it or its folders): pass a run or sweep dir")
    finished, left_out = [], []
    for job in jobs:
        why = unfinished(job)
        if why is None:
            finished.append(job)
        else:
            left_out.append(f"{job} ({why})")
    if not finished:
        raise UserError(f"{path}: none of its {len(jobs)} runs finished training: {'; '.join(left_out)}")
    return finished, left_out


def unfinished(run_dir: Path) -> str | None:
    """Why run_dir holds no finished training (None: it does): failed (its error), preempted, interrupted, no
    summary.json yet, or an unreadable one."""
    summary = RunSummary.read(run_dir)
    error = (run_dir / ERROR).read_text().strip().removeprefix("error: ") if (run_dir / ERROR).is_file() else ""
    if summary.problem:
        return summary.problem
    if not summary.found:
        return f"failed: {error}" if error else "no summary.json: still training, or stopped before writing it"
    status = summary.values.get("status")
    if status == "finished":
        return None
    return f"{status}: {error}" if error else str(status)


def eval_config(overrides: list[str]) -> DictConfig:
    """The `eval` config composed from the eval group (option `jobs` unless `eval=` names one) and the
    overrides; anything but an eval setting is refused."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from selfsup.run.checks import null_part
    from selfsup.run.cli import CONF_DIR
    from selfsup.run.schema import register

    other = [o for o in overrides if override_key(o) != "eval" and not override_key(o).startswith("eval.")]
    if other:
        raise UserError(
            f"selfsup-eval takes eval settings only (eval=..., eval.*, lm_eval.*): {other[0]} is not one; a run "
            f"keeps its own objective, architecture and data"
        )
    off = {override_key(o): o for o in overrides if o.startswith("~") or o.partition("=")[2].strip() == "null"}
    for o in overrides:
        above = next((key for key in off if override_key(o).startswith(key + ".")), None)
        if above is not None:
            raise UserError(f"{o} sets a key under {above}, which {off[above]} turns off: drop one of the two")
    if not any(override_key(o) == "eval" for o in overrides):
        overrides = [f"eval={DEFAULT_EVAL}", *overrides]
    register()
    try:
        with initialize_config_dir(str(CONF_DIR), version_base=None):
            return compose("train", overrides=overrides).eval
    except (HydraException, OmegaConfBaseException) as err:
        raise config_error(err) from None
    except (AttributeError, AssertionError) as err:  # a setting inside a part that is null
        null = null_part(err, overrides)
        if null is None:
            raise
        raise UserError(null) from None


def config_error(err: Exception) -> UserError:
    """Hydra's or omegaconf's error of composing an override, in one line: its first two lines with the cause of
    Hydra's "Error merging override" joined; a config option that is not there with the options there are."""
    said = str(err) + (f"\n{err.__cause__}" if err.__cause__ is not None else "")
    lines = [line.strip() for line in said.splitlines() if line.strip()]
    if "Available options" in str(err):  # eval=<an option that is not there>
        at = next(i for i, line in enumerate(lines) if line.startswith("Available options"))
        options = [line for line in lines[at + 1 :] if not line.startswith(("Config search path", "provider="))]
        return UserError(f"{lines[0]}: use one of {', '.join(options)}")
    return UserError(" ".join(lines[:2]))


def is_lm_eval(override: str) -> bool:
    return override_key(override) == "lm_eval" or override_key(override).startswith("lm_eval.")


def lm_eval_config(overrides: list[str]):
    """selfsup.interop.lmeval.LMEval from conf/lm_eval.yaml and the lm_eval.* overrides, checked (task names included)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from hydra.utils import instantiate
    from omegaconf.errors import OmegaConfBaseException

    from selfsup.run.cli import CONF_DIR

    try:
        with initialize_config_dir(str(CONF_DIR), version_base=None):
            lm = instantiate(compose("lm_eval", overrides=overrides).lm_eval, _convert_="all")
    except (HydraException, OmegaConfBaseException) as err:
        raise config_error(err) from None
    lm.check()
    return lm


def finished_run(run_dir: Path) -> tuple[dict, Path]:
    """A finished run's summary and the weights it ended with (checkpoints/last.ckpt), or one line why not."""
    why = unfinished(run_dir)
    if why is not None:
        raise UserError(f"{run_dir} did not finish training ({why}): evaluate finished runs only")
    summary = RunSummary.read(run_dir)
    if not (run_dir / RECORDED_CONFIG).is_file():
        raise UserError(f"{run_dir} is not a selfsup run dir (no .hydra/config.yaml)")
    checkpoint = run_dir / LAST_CHECKPOINT
    if not checkpoint.is_file():
        raise UserError(f"{run_dir} has no checkpoints/last.ckpt: the weights it ended with are gone")
    return summary.values, checkpoint


class LMPlanned:
    """One run to score with lm-eval: its weights loaded and checked exportable, or why lm-eval cannot score it."""

    def __init__(self, run_dir: Path, lm):
        from selfsup.interop.export import exporter
        from selfsup.interop.pretrained import load
        from selfsup.run.run_dir import merged_config
        from selfsup.run.settings import RunSettings

        self.run_dir, self.lm = run_dir, lm
        self.summary, self.checkpoint = finished_run(run_dir)
        self.settings = RunSettings.of(merged_config(run_dir, []))
        self.pretrained = load(self.checkpoint)
        self.architecture = self.pretrained.architecture
        self.unsupported = lm.unsupported(self.architecture)
        if self.unsupported is None:
            exporter(self.pretrained.model, self.architecture)  # settings no transformers class computes: one line

    def run(self) -> tuple[dict, dict, dict]:
        cache = self.settings.data.cache_dir
        return self.lm.evaluate(
            self.pretrained, Path(cache) if cache else None, say=lambda line: print(f"  {line}", flush=True)
        )


class Planned:
    """One run to evaluate: its dir, summary, config (its eval replaced) and what prepare() made of it."""

    def __init__(self, run_dir: Path, evaluation_config: DictConfig):
        from selfsup.run.build import prepare
        from selfsup.run.run_dir import merged_config
        from selfsup.run.settings import RunSettings

        self.run_dir = run_dir
        self.summary, self.checkpoint = finished_run(run_dir)
        cfg = merged_config(run_dir, [])
        OmegaConf.update(cfg, "eval", evaluation_config, merge=False)
        self.settings = RunSettings.of(cfg)
        self.corpus, self.objective, self.evaluation = prepare(self.settings, quiet=True)
        if self.evaluation is None:
            raise UserError("the eval settings evaluate nothing: name a task (+eval.tasks.NAME={...}) or a part")

    def setup(self) -> None:
        """The run's last weights loaded and its evaluation set up on them."""
        from selfsup.interop.pretrained import load
        from selfsup.run.build import make, model_length

        settings, corpus = self.settings, self.corpus
        self.model = load(self.checkpoint).model
        shape = make(settings.architecture, "architecture")
        max_len = model_length(settings.data.seq_len, self.objective)
        self.evaluation.setup(
            settings.family,
            corpus.vocab,
            corpus.tokenizer,
            settings.data.seq_len,
            corpus.val_tokens,
            max_len,
            make_model=lambda: shape.build(corpus.vocab.size, max_len),
            train_tokens=corpus.train_tokens,
            objective=self.objective.name,
            span=getattr(self.objective, "mean_span_length", None),
            cache_dir=corpus.cache_dir,
            infills=self.objective.infills,
        )

    def run(self) -> tuple[dict, dict]:
        """(metrics, outcomes) of the run's last weights (after setup)."""
        metrics = self.evaluation(self.model)
        if metrics is None:
            raise UserError("stopped: nothing of this evaluation was kept")
        return metrics, self.evaluation.outcomes()


def plan_flag(args: list[str]) -> tuple[bool, list[str]]:
    """(whether --plan was given, the other arguments)."""
    return "--plan" in args, [a for a in args if a != "--plan"]


def print_plan(planned: list[Planned]) -> None:
    """Every run set up and its plan said (selfsup.evaluation.plan: its parts, what the cache holds, about how
    long), then the whole: `plan: 3 runs, about 12 min in all; random-init baselines from the cache: 4 of 12`."""
    from selfsup.evaluation.baselines import duration

    pending: set = set()  # cache entries an earlier run will have written
    seconds, cached, baselines = 0.0, 0, 0
    for plan in planned:
        plan.setup()
        found = plan.evaluation.plan(plan.model, pending)
        print(f"{plan.run_dir}: {found.line()}", flush=True)
        seconds += found.seconds
        cached, baselines = cached + found.baselines[0], baselines + found.baselines[1]
    print(
        f"plan: {len(planned)} run{'s' if len(planned) > 1 else ''}, about {duration(seconds)} in all; "
        f"random-init baselines from the cache: {cached} of {baselines}",
        flush=True,
    )


def evaluated_parts(keys) -> set[str]:
    """The scores (eval/<name>) that metric or outcome keys belong to."""
    return {part_of(k) for k in keys if k.startswith("eval/")}


def check_writable(run_dir: Path) -> None:
    """UserError unless selfsup-eval can write into run_dir and read the evaluated.json and evaluated_outcomes.npz
    already there (a damaged pair is refused, never dropped): checked before anything is evaluated."""
    try:
        with tempfile.NamedTemporaryFile(dir=run_dir, prefix=".selfsup-eval-", delete=True):
            pass
    except OSError as err:
        raise UserError(
            f"{run_dir} cannot be written ({err.strerror}): selfsup-eval writes its scores there (evaluated.json); "
            f"copy the run to a writable folder and evaluate the copy"
        ) from None
    json_path, npz = run_dir / EVALUATED, run_dir / EVALUATED_OUTCOMES
    problem = read_evaluated(run_dir)[1]
    if problem:
        raise UserError(
            f"{json_path} cannot be read as selfsup-eval's scores ({problem}): restore it, or move it and "
            f"{EVALUATED_OUTCOMES} aside to evaluate the run anew; nothing was evaluated"
        )
    if npz.exists():
        try:
            with np.load(npz, allow_pickle=False) as data:
                for key in data.files:
                    data[key]
        except Exception as err:  # noqa: BLE001 - numpy's many ways to say a file is damaged, said in one line
            raise UserError(
                f"{npz} cannot be read ({type(err).__name__}: {err}): restore it, or move it and {EVALUATED} aside to "
                f"evaluate the run anew; nothing was evaluated"
            ) from None


def write_results(run_dir: Path, metrics: dict, outcomes: dict, record: dict) -> dict:
    """Merge this evaluation into <run_dir>/evaluated.json and evaluated_outcomes.npz (the scores it evaluated
    replaced, the others kept; both files checked readable before the evaluation: check_writable), written as a
    pair: both new files are written in full before either replaces the old one (a full disk leaves the old pair
    and no temporary file, said in one line); returns evaluated.json's content."""
    path, npz = run_dir / EVALUATED, run_dir / EVALUATED_OUTCOMES
    old = read_evaluated(run_dir)[0] or {}
    now = evaluated_parts(list(metrics) + list(outcomes))
    kept = {k: v for k, v in (old.get("eval") or {}).items() if part_of(k) not in now}
    arrays = {}
    if npz.is_file():
        with np.load(npz, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files if part_of(k) not in now}
    arrays.update(with_margins(outcomes, metrics))
    content = {
        "eval": {**kept, **metrics},
        "pairs_scorers": {**(old.get("pairs_scorers") or {}), **record.pop("pairs_scorers", {})},
        "evaluations": [*(old.get("evaluations") or []), record],
    }
    tmp_npz, tmp_json = run_dir / f".{EVALUATED_OUTCOMES}.tmp.npz", run_dir / f".{EVALUATED}.new"
    try:
        np.savez(tmp_npz, **arrays)
        write_json(tmp_json, content)
        os.replace(tmp_npz, npz)
        os.replace(tmp_json, path)
    except OSError as err:
        tmp_npz.unlink(missing_ok=True)
        tmp_json.unlink(missing_ok=True)
        raise UserError(
            f"{run_dir}: {EVALUATED} and {EVALUATED_OUTCOMES} could not be written ({err.strerror or err}): "
            f"this evaluation of the run was not kept, its former scores are unchanged"
        ) from None
    return content


def evaluated_lines(rows: list[dict], width: int = 100) -> list[str]:
    """The table of the evaluated scores and the verdict over them."""
    from selfsup.results.summary import (
        JOB_NOTE,
        LM_EVAL_NOTE,
        _table,
        job_columns,
        lm_eval_columns,
        swept_columns,
        task_names,
    )
    from selfsup.results.verdict import verdict_lines

    names = task_names(k for r in rows for k in r["eval"])
    columns = [("job", "job"), ("objective", "objective"), *swept_columns(rows)]
    columns += [
        (f"eval/{n}/{part}", f"{n} {title}")
        for n in names
        for part, title in (("accuracy", "acc"), ("margin", "margin"))
    ]
    columns += job_columns(rows) + lm_eval_columns(rows)
    lines = _table(rows, columns).splitlines() if len(columns) > 2 + len(swept_columns(rows)) else []
    if names:
        lines.append(
            "acc: the mean over fine-tuning seeds (finetune) or the linear probe's; margin: the accuracy minus the "
            "same on untrained models of the run's shape, paired bootstrap 95% interval over test examples, "
            "random-init and fine-tuning seeds"
        )
    if job_columns(rows):
        lines.append(JOB_NOTE)
    if lm_eval_columns(rows):
        lines.append(LM_EVAL_NOTE)
    for row in rows:
        unwritten = (row.get("evaluations") or [{}])[-1].get("not_written") or {}
        if unwritten:
            lines.append(
                f"{row.get('objective')} ({Path(row.get('run_dir') or '?').name}) on {row.get('architecture')}: "
                f"{sorted(set(unwritten.values()))[0]}: not scored on {', '.join(unwritten)}"
            )
    return lines + verdict_lines(rows, width=width)


EXAMPLES = """examples (each command on one line, as a shell reads it):
  a classification task of your own (a text and a label per line; a test file, or test_fraction):
    selfsup-eval SWEEP '+eval.tasks.topic={source: text_files, paths: [train.jsonl], test_paths: [test.jsonl], text_field: text, label_field: label}'
  a sentence-pair task in GLUE's layout (RTE: sentence1, sentence2, label):
    selfsup-eval SWEEP '+eval.tasks.rte={source: text_files, paths: [rte/train.jsonl], test_paths: [rte/validation.jsonl], text_fields: [sentence1, sentence2]}'
  an lm-evaluation-harness task on each run's export (pip install -e '.[lmeval]'):
    selfsup-eval SWEEP 'lm_eval.tasks=[arc_easy]' lm_eval.limit=200"""


def help_text() -> str:
    """selfsup-eval --help: the usage, the arguments, the built-in tasks and jobs, three examples, and every eval
    and lm_eval option with its default (composed as a run would compose them)."""
    from hydra import compose, initialize_config_dir

    from selfsup.evaluation.jobs import GENERATION_JOBS
    from selfsup.evaluation.tasks import BUILTIN_TASKS
    from selfsup.run.cli import CONF_DIR

    every = eval_config(["eval=default"])
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        lm = compose("lm_eval").lm_eval
    groups = sorted(p.stem for p in (CONF_DIR / "eval").glob("*.yaml"))
    jobs = (CONF_DIR / "eval" / f"{DEFAULT_EVAL}.yaml").read_text()
    lines = [
        __doc__.split("\n\n")[0].strip(),
        "",
        USAGE,
        "",
        "arguments:",
        "  RUN_OR_SWEEP_DIR    a run dir, or a sweep dir (each job that finished training; the others named)",
        "  --plan              the plan (each run's parts, what the cache holds, an estimate), then stop",
        "  -h, --help          this help",
        "  eval overrides      key=value of the eval options below; eval=NAME picks the group's option "
        f"({', '.join(groups)}; default {DEFAULT_EVAL}); '+eval.tasks.NAME={{...}}' adds a task, "
        "'~eval.tasks.NAME' drops one",
        "  lm_eval overrides   lm_eval.KEY=value of the lm_eval options below (lm-eval on each run's export)",
        "",
        f"built-in tasks (source: builtin, task: NAME): {', '.join(BUILTIN_TASKS)}",
        f"built-in generation jobs (source: builtin, job: NAME): {', '.join(GENERATION_JOBS)}",
        "",
        *EXAMPLES.splitlines(),
        "",
        "eval options with their defaults (eval=default: every part on; key=value overrides any):",
        *["  " + line for line in OmegaConf.to_yaml(every).splitlines()],
        "",
        f"selfsup-eval's default, eval={DEFAULT_EVAL} (conf/eval/{DEFAULT_EVAL}.yaml), sets:",
        *["  " + line for line in jobs.splitlines() if line.strip() and not line.startswith("#")],
        "",
        "lm_eval options with their defaults (conf/lm_eval.yaml):",
        *["  " + line for line in OmegaConf.to_yaml(lm).splitlines()],
    ]
    indent = lambda line: " " * (len(line) - len(line.lstrip()) + 4)  # noqa: E731 - a line's rest, indented
    return "\n".join(
        out
        for line in lines
        for out in (
            [line]  # an example's command stays one line: a command wrapped inside its quotes would not run
            if line.startswith("    selfsup-eval ")
            else textwrap.wrap(line, 100, subsequent_indent=indent(line), break_on_hyphens=False) or [""]
        )
    )


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(
            __doc__.split("\n\n")[0].strip() + "\n\n" + USAGE + "\n\nselfsup-eval --help: the arguments, every option"
        )
        raise SystemExit(2)
    if args[0] in ("-h", "--help"):
        print(help_text())
        return
    from selfsup.evaluation.baselines import report_progress
    from selfsup.evaluation.job_scores import WRITTEN_COLUMNS, written_lines
    from selfsup.results.summary import read_summaries
    from selfsup.tools.eval_wandb import lm_eval_table, log_evaluation

    try:
        only_plan, args = plan_flag(args)
        path, overrides = Path(args[0]).expanduser(), args[1:]
        dirs, left_out = run_dirs(path)
        lm_overrides = [o for o in overrides if is_lm_eval(o)]
        overrides = [o for o in overrides if not is_lm_eval(o)]
        lm = lm_eval_config(lm_overrides) if lm_overrides else None
        # lm_eval.* alone: lm-eval alone; eval settings too (or none of either): the lab's evaluation as well
        evaluation_config = eval_config(overrides) if overrides or lm is None else None
        # everything checked before anything is written
        planned = [Planned(d, evaluation_config) for d in dirs] if evaluation_config is not None else []
        lm_planned = [LMPlanned(d, lm) for d in dirs] if lm is not None else []
        for d in dirs:
            check_writable(d)
        if lm_planned and all(p.unsupported for p in lm_planned):
            what = dirs[0] if len(dirs) == 1 else f"every run of {path}"
            raise UserError(f"{what}: {lm_planned[0].architecture}: {lm_planned[0].unsupported}")
        report_progress(lambda line: print(f"  {line}", flush=True))
        for line in left_out:
            print(f"left out: {line}", flush=True)
        if planned:
            print_plan(planned)
        if only_plan:
            return
        for plan in planned:
            started = time.perf_counter()
            print(f"{plan.run_dir}: {plan.summary.get('objective')} on {plan.settings.family}", flush=True)
            metrics, outcomes = plan.run()
            written = plan.evaluation.written_examples
            record = {
                "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "checkpoint": str(plan.checkpoint),
                "overrides": overrides,
                "protocols": {n: plan.evaluation.protocol_of(t) for n, t in plan.evaluation.tasks.items()},
                "not_written": dict(plan.evaluation.not_written),  # generation jobs the run's family cannot write
                "seconds": round(time.perf_counter() - started, 1),
                "estimated_seconds": round(plan.evaluation.estimated, 1),  # the plan's (print_plan)
                # each part's, task's and job's (the random-init baselines apart: computed once per shape, then cached)
                "part_seconds": {
                    k: round(v, 1) for k, v in {**plan.evaluation.part_seconds, **plan.evaluation.item_seconds}.items()
                },
                "pairs_scorers": plan.evaluation.pair_scorers(),
                # the settings that made each part's scores (the report shows them; the verdict never pools across)
                "settings": {k: v for k, v in plan.evaluation.part_settings().items() if k in evaluated_parts(metrics)},
                "per_class": dict(plan.evaluation.per_class),  # each task's (probe.per_class)
                # each generation job's shown test examples: what the run and random-init wrote
                "written_examples": {
                    job: [dict(zip(WRITTEN_COLUMNS, row)) for row in rows] for job, rows in written.items()
                },
            }
            write_results(plan.run_dir, metrics, outcomes, record)
            tables = {f"eval/{job}/predictions": (WRITTEN_COLUMNS, rows) for job, rows in written.items()}
            for task, found in record["per_class"].items():
                columns = ["class", "test_examples", "accuracy", "f1"]
                tables[f"eval/{task}/per_class"] = (
                    columns,
                    [list(r) for r in zip(*(found[c] for c in ("classes", *columns[1:])))],
                )
            logged = log_evaluation(plan.run_dir, plan.settings.logger, plan.settings.resolved, metrics, tables)
            print(f"  evaluated in {record['seconds']:.0f} s -> {plan.run_dir / EVALUATED}{logged}", flush=True)
            for line in written_lines(written):
                print(line, flush=True)
        for plan in lm_planned:
            head = f"{plan.run_dir}: {plan.summary.get('objective')} on {plan.architecture}"
            if plan.unsupported:
                print(f"{head}: not scored by lm-eval: {plan.unsupported}", flush=True)
                continue
            print(head, flush=True)
            started = time.perf_counter()
            metrics, outcomes, record = plan.run()
            record.update(
                when=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                checkpoint=str(plan.checkpoint),
                overrides=lm_overrides,
                seconds=round(time.perf_counter() - started, 1),
            )
            write_results(plan.run_dir, metrics, outcomes, record)
            config = {**plan.settings.resolved, "lm_eval": dataclasses.asdict(plan.lm)}
            table = lm_eval_table(metrics)
            tables = {"eval/lm_eval/results": table} if table else {}
            logged = log_evaluation(plan.run_dir, plan.settings.logger, config, metrics, tables)
            print(f"  lm-eval in {record['seconds']:.0f} s -> {plan.run_dir / EVALUATED}{logged}", flush=True)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print(
            "error: interrupted (Ctrl-C): the runs evaluated before it keep their evaluated.json; the run under way "
            "keeps its former scores",
            file=sys.stderr,
        )
        raise SystemExit(130) from None
    single = dirs == [path]
    rows = [{**RunSummary.read(path).values, "run_dir": str(path)}] if single else read_summaries(path)
    print("\n".join(evaluated_lines(evaluated_rows(rows))))


if __name__ == "__main__":
    main()
