"""The end-of-run lines (`run_lines`) and the end-of-sweep table (`summary_table` of the rows `read_summaries`
reads from a sweep dir), each followed by the verdict (selfsup.results.verdict). The table and selfsup-report
show the same values, defined in DEFINITIONS."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from selfsup.common.names import (
    ERROR,
    EVALUATED,
    EVALUATED_OUTCOMES,
    FIXED_LOSS,
    HELDOUT_BPB,
    PAIRS,
    PAIRS_MARGIN,
    PROBE,
    RunSummary,
    mistyped,
)
from selfsup.evaluation.fixed import split_lines
from selfsup.evaluation.heldout import heldout_line
from selfsup.evaluation.pairs import pair_lines
from selfsup.evaluation.stats import Interval
from selfsup.results.columns import LABELS, PROBE_MARGIN
from selfsup.results.groups import SITTINGS, checked, exam_of, run_margin
from selfsup.results.settings import part_settings
from selfsup.results.verdict import count, verdict_lines

COLUMNS = [
    (k, LABELS[k])
    for k in (
        "job", "objective", "architecture", "parameters", "steps", "flops_seen", "targets_seen", "val_loss",
        FIXED_LOSS, HELDOUT_BPB, PAIRS, PAIRS_MARGIN, PROBE, PROBE_MARGIN, "signal_per_token", "tokens_per_sec",
        "wall_seconds", "status",
    )
]  # fmt: skip
# the end-of-sweep table in two, each within 160 columns for a sweep of two settings: the scores (the swept values
# and the user's tasks beside them), then the runs' facts
SCORES_TABLE = [
    "job",
    "objective",
    "val_loss",
    FIXED_LOSS,
    HELDOUT_BPB,
    PAIRS,
    PAIRS_MARGIN,
    PROBE,
    PROBE_MARGIN,
]
FACTS_TABLE = [
    "job", "objective", "architecture", "parameters", "steps", "flops_seen", "targets_seen", "signal_per_token",
    "tokens_per_sec", "wall_seconds", "status",
]  # fmt: skip


DEFINITIONS = (
    "*: within one family only: val loss grades each run on its own objective and settings (compare it only "
    "between seeds of one setting), the fixed exam and the held-out text's scorer are its family's; "
    "FLOPs: training FLOPs spent; targets: scored targets over training; val loss: the last validation; "
    "fixed loss, pairs acc, probe acc: the last evaluation; fixed loss: the family's fixed exam with its bootstrap "
    "95% interval over the exam's windows; held-out bpb: a held-out text scored by the family's scorer, in bits per "
    "UTF-8 byte, with its 95% interval over the text's documents; pairs acc: zero-shot minimal pairs (decoders "
    "by summed log-probability, encoders by pseudo-log-likelihood, encoder-decoders by the decoder's "
    "log-probability given a blank encoder input); pairs margin, probe margin: the accuracy minus the "
    "mean of the same score on untrained models of the run's shape (random-init), with its paired "
    "bootstrap 95% interval; <task> acc, <task> margin: the same for each of the user's tasks "
    "(eval.tasks.<task>); signal/token: scored targets / input tokens of the last validation; "
    "tokens/s: input tokens per second of training time over the run (validation, evaluation and the "
    "first step excluded); wall time: the whole run; job: the run's folder in the sweep dir"
)


def task_names(keys) -> list[str]:
    """The evaluation tasks (the built-in probe and the user's eval.tasks.*) of eval/<task>/accuracy keys."""
    names = [k.split("/")[1] for k in keys if k.count("/") == 2 and k.startswith("eval/") and k.endswith("/accuracy")]
    return [n for n in dict.fromkeys(names) if n not in ("pairs", "fixed")]


def task_columns(rows: list[dict]) -> list[tuple[str, str]]:
    """(key, title) of the accuracy, margin and simple baseline's accuracy (TF-IDF + logistic regression, where
    recorded) of each task beside the probe, in the order first seen."""
    keys = {k for r in rows for k in (r.get("eval") or {})}
    return [
        (f"eval/{n}/{part}", f"{n} {title}")
        for n in task_names(keys)
        if n != "probe"
        for part, title in (("accuracy", "acc"), ("margin", "margin"), ("tfidf_accuracy", "tf-idf"))
        if part != "tfidf_accuracy" or f"eval/{n}/tfidf_accuracy" in keys
    ]


def job_names(keys) -> list[str]:
    """The generation jobs (eval.generation.*) of eval/<job>/token_f1 keys."""
    names = [k.split("/")[1] for k in keys if k.count("/") == 2 and k.startswith("eval/") and k.endswith("/token_f1")]
    return list(dict.fromkeys(names))


def job_columns(rows: list[dict]) -> list[tuple[str, str]]:
    """(key, title) of each generation job's loss and token F1 with their margins, in the order first seen (the
    loss's margin: random-init's loss minus the run's)."""
    names = job_names(k for r in rows for k in (r.get("eval") or {}))
    return [
        (f"eval/{n}/{part}", f"{n} {title}")
        for n in names
        for part, title in (
            ("loss", "loss"),
            ("loss/margin", "loss margin"),
            ("token_f1", "F1"),
            ("token_f1/margin", "F1 margin"),
        )
    ]


def lm_eval_metrics(rows: list[dict]) -> list[tuple[str, str]]:
    """(task, metric) of each lm-eval metric with a margin (eval/lm_eval/<task>/<metric>/margin), in the order
    first seen."""
    keys = [k for r in rows for k in (r.get("eval") or {})]
    found = [k.split("/")[2:4] for k in keys if k.startswith("eval/lm_eval/") and k.endswith("/margin")]
    return list(dict.fromkeys((task, metric) for task, metric in found))


def lm_eval_columns(rows: list[dict]) -> list[tuple[str, str]]:
    """(key, title) of each lm-eval metric, its stderr, its chance level (a multiple-choice task's acc, acc_norm)
    and its margin, in the order first seen."""
    keys = {k for r in rows for k in (r.get("eval") or {})}
    columns = []
    for task, metric in lm_eval_metrics(rows):
        head = f"eval/lm_eval/{task}"
        columns += [(f"{head}/{metric}", f"{task} {metric}"), (f"{head}/{metric}_stderr", f"{task} {metric} stderr")]
        if f"{head}/chance_{metric}" in keys:
            columns.append((f"{head}/chance_{metric}", f"{task} {metric} chance"))
        columns.append((f"{head}/{metric}/margin", f"{task} {metric} margin"))
    return columns


LM_EVAL_NOTE = (
    "lm-eval: each metric with lm-eval's stderr; chance: a multiple-choice task's score by a random pick among each "
    "document's choices; margin: the run's minus the same tasks on untrained models of its "
    "shape (random-init's minus the run's where lower is better; a perplexity's: log(random-init's) - log(the "
    "run's)), 95% interval (paired bootstrap over documents and random-init seeds; from the stderrs for a metric "
    "weighted by length: word_perplexity, bits_per_byte)"
)

JOB_NOTE = (
    "loss: the target's per-token loss under teacher forcing, its margin random-init's minus the run's (positive: "
    "lower than random-init); F1: greedy decoding's token F1 (SQuAD's), its margin the run's minus random-init's; "
    "each the mean over fine-tuning seeds (the infilling job: zero-shot, not fine-tuned), paired bootstrap 95% "
    "interval; copy-input and frequent-target F1: the simple baselines, copying the input and writing the most "
    "frequent training target"
)


def job_lines(evaluated: dict) -> list[str]:
    """One line per generation job: each score, its margin over random-init with its 95% interval, and random-init's."""
    lines = []
    row = {"eval": evaluated}
    for name in job_names(evaluated):
        parts = [name]
        for score, title in (("loss", "loss"), ("exact_match", "EM"), ("token_f1", "F1")):
            if evaluated.get(f"eval/{name}/{score}") is None:
                continue
            text = f"{title} {evaluated[f'eval/{name}/{score}']:.3f}"
            ri, margin = evaluated.get(f"eval/{name}/random_init_{score}"), run_margin(row, f"eval/{name}/{score}")
            if ri is not None:
                text += f" (random-init {ri:.3f}" + (f", margin {margin})" if margin is not None else ")")
            parts.append(text)
        lines.append("  ".join(parts))
    return lines


def task_lines(evaluated: dict) -> list[str]:
    """One line per task: its accuracy, margin over random-init with its 95% interval, and baselines."""
    lines = []
    for name in task_names(evaluated):
        row = {"eval": evaluated}
        parts = [f"{name} acc {_fmt('eval/', evaluated[f'eval/{name}/accuracy'])}"]
        margin = run_margin(row, f"eval/{name}")
        if margin is not None:
            parts.append(f"margin {margin}")
        mean, sd = (evaluated.get(f"eval/{name}/random_init_{k}") for k in ("accuracy", "accuracy_sd"))
        if mean is not None:
            parts.append(f"random-init {mean:.3f}" + (f" +- {sd:.3f}" if sd is not None else ""))
        if evaluated.get(f"eval/{name}/majority_accuracy") is not None:
            parts.append(f"majority {evaluated[f'eval/{name}/majority_accuracy']:.3f}")
        lines.append("  ".join(parts))
    return lines


def value(row: dict, key: str):
    """A summary value; eval/... keys come from its `eval` dict, swept settings from `swept`."""
    if key.endswith("/margin"):
        return run_margin(row, key.removesuffix("/margin"))
    sitting = next((s for s in SITTINGS if s.key == key), None)
    if sitting is not None and exam_of(row, sitting) is not None:  # with its interval
        return exam_of(row, sitting)
    if key.startswith("eval/"):
        return (row.get("eval") or {}).get(key)
    if key in (row.get("swept") or {}):
        return row["swept"][key]
    if key == "job":
        return Path(row["run_dir"]).name if row.get("run_dir") else None
    if key == "architecture":  # t5 where the family is encoder_decoder
        return row.get("architecture_preset") or row.get(key)
    return row.get(key)


def shown_path(path) -> str:
    """A path as the console shows it: relative to the working directory when it lies under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def run_lines(row: dict) -> list[str]:
    """The end of a single run, in lines of at most 100 characters (the table is a sweep's)."""

    def part(key: str, title: str) -> str | None:
        v = value(row, key)
        return None if v is None else f"{title} {_fmt(key, v)}"

    wall = row.get("wall_seconds")
    head = (
        f"{row.get('status', '?')}: {row.get('objective')} on {value(row, 'architecture')}, "
        f"{_fmt('parameters', row.get('parameters'))} parameters, {row.get('steps', 0)} steps"
        + (f", wall time {_fmt('wall_seconds', wall)}" if wall is not None else "")
    )
    scores = [
        p
        for p in (
            part("val_loss", "val loss"),
            part("start_val_loss", "at step 0"),
            part(FIXED_LOSS, "fixed loss"),
            part("signal_per_token", "signal/token"),
        )
        if p
    ]
    lines = [head, "  " + "  ".join(scores)] if scores else [head]
    if row.get("chain"):  # continued pretraining (init.from=RUN_DIR): the chain as one arm, its totals
        lines.append(
            f"  continued from {shown_path((row.get('parent') or {}).get('run_dir'))}: {row['chain']} "
            f"({row.get('chain_steps')} steps, {_fmt('flops_seen', row.get('chain_flops_seen'))} FLOPs in all)"
        )
    lines += ["  " + line for line in task_lines(row.get("eval") or {})]
    lines += ["  " + line for line in job_lines(row.get("eval") or {})]
    lines += ["  " + line for line in split_lines(row.get("eval") or {})]
    lines += ["  " + line for line in [heldout_line(row.get("eval") or {})] if line]
    lines += ["  " + line for line in pair_lines(row.get("eval") or {}, row.get("pairs_scorers") or {})]
    lines += verdict_lines([row])
    if row.get("tokens_per_sec"):
        lines.append(
            f"  tokens/s {_fmt('tokens_per_sec', row['tokens_per_sec'])} (training time: validation, "
            f"evaluation and the first step excluded)"
        )
    if row.get("error"):
        lines.append(f"  error: {row['error']}")
    lines.append(f"run dir: {shown_path(row.get('run_dir'))}")
    if row.get("wandb_dir"):
        lines.append(f"W&B run files: {shown_path(row['wandb_dir'])}")
        lines.append(f"  upload: wandb sync {shown_path(row['wandb_dir'])}")
    return lines


def _fmt(key: str, v) -> str:
    if v is None:
        return "-"
    if isinstance(v, Interval):
        return str(v)
    if key == "parameters":
        return f"{v / 1e6:.2f}M"
    if key == "flops_seen":
        return f"{v:.2g}"
    if key == "targets_seen":
        return count(v)
    if key == "tokens_per_sec":
        return f"{v:,.0f}"
    if key == "wall_seconds":
        return str(timedelta(seconds=round(v)))
    if isinstance(v, float) and key.startswith("eval/lm_eval/"):
        return f"{v:.4g}"
    if isinstance(v, float):
        return f"{v:.3f}" if key in dict(COLUMNS) or key.startswith("eval/") else f"{v:.4g}"
    return str(v)


def swept_columns(rows: list[dict]) -> list[tuple[str, str]]:
    """(key, title) of the settings the rows' sweep varies, in the order first seen."""
    keys = list(dict.fromkeys(k for r in rows for k in (r.get("swept") or {})))
    return [(k, k.split(".")[-1]) for k in keys]


def summary_table(rows: list[dict]) -> str:
    """The scores of the runs (with the swept values and the user's tasks), then their facts (cost, throughput),
    two tables separated by an empty line."""
    titles = dict(COLUMNS)
    at = SCORES_TABLE.index(PROBE_MARGIN) + 1
    scores = [(k, titles[k]) for k in SCORES_TABLE[:2]] + swept_columns(rows)
    scores += [(k, titles[k]) for k in SCORES_TABLE[2:at]] + task_columns(rows) + job_columns(rows)
    if not any(r.get("eval") for r in rows):  # eval=none: no empty columns
        scores = [c for c in scores if not c[0].startswith("eval/")]
    facts = [(k, titles[k]) for k in FACTS_TABLE]
    return _table(rows, scores) + "\n\n" + _table(rows, facts)


TABLE_WIDTH = 160  # the console's tables (its other lines: 100)


def column_chunks(widths: list[int], keep: int, width: int, sep: int = 3) -> list[list[int]]:
    """The columns of a table too wide for `width` as several tables, each the first `keep` columns (what tells
    the rows apart) and as many of the others, in order, as fit (one at least)."""
    chunks, current = [], []
    base = sum(widths[:keep]) + sep * keep
    for i in range(keep, len(widths)):
        if current and base + sum(widths[j] + sep for j in current) + widths[i] > width:
            chunks.append(current)
            current = []
        current.append(i)
    return [list(range(keep)) + c for c in chunks + [current]]


def _table(rows: list[dict], columns: list[tuple[str, str]], keep: int = 2) -> str:
    """The rows as a console table of `columns`, split into several (each repeating the first `keep` columns)
    where one would be wider than TABLE_WIDTH."""
    cells = [[title for _, title in columns]] + [[_fmt(k, value(r, k)) for k, _ in columns] for r in rows]
    width = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    tables = []
    for chunk in column_chunks(width, min(keep, len(columns)), TABLE_WIDTH):
        lines = [" | ".join(row[i].ljust(width[i]) for i in chunk).rstrip() for row in cells]
        lines.insert(1, "-+-".join("-" * width[i] for i in chunk))
        tables.append("\n".join(lines))
    return "\n\n".join(tables)


def _job_key(path: Path):
    return (len(path.name), path.name)


def read_evaluated(run_dir: Path) -> tuple[dict | None, str | None]:
    """<run_dir>/evaluated.json, selfsup-eval's scores of a run, as (its content, None) with its values that are not
    numbers left out; (None, None) where there is none; (None, what is wrong in a few words) where it cannot be
    read as selfsup-eval's scores (truncated, not an object, eval not {metric: number}, a score not a finite
    number)."""
    path = Path(run_dir) / EVALUATED
    if not path.is_file():
        return None, None
    try:
        content = json.loads(path.read_text())
    except (OSError, ValueError) as err:  # (a torn write, binary garbage: UnicodeDecodeError)
        return None, str(err).splitlines()[0] if str(err) else type(err).__name__
    if not isinstance(content, dict):
        return None, f"a JSON {type(content).__name__}, not an object"
    evaluated = content.get("eval")
    wrong = mistyped({"eval": evaluated}) if evaluated is not None else "eval is missing or null"
    for key, kind in (("evaluations", list), ("pairs_scorers", dict)):
        if not wrong and content.get(key) is not None and not isinstance(content[key], kind):
            wrong = f"{key} is a {type(content[key]).__name__}, not a {kind.__name__}"
    if wrong:
        return None, wrong
    numbers = {k: v for k, v in evaluated.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {**content, "eval": numbers}, None


def evaluated_rows(rows: list[dict]) -> list[dict]:
    """The rows (summary.json dicts with run_dir) of the runs selfsup-eval scored, each with its evaluated.json's
    scores as `eval`, its evaluations (when, overrides, seconds) and its outcomes file: what the table and the
    verdict read. A finished run whose evaluated.json cannot be read is a row without scores that says why
    (`left_out`: the verdict names it)."""
    found = []
    for row in rows:
        if row.get("status") != "finished":
            continue
        content, problem = read_evaluated(row.get("run_dir") or "")
        if problem:
            found.append({**row, "eval": {}, "left_out": f"{EVALUATED} unreadable: {problem}"})
        elif content is not None:
            evaluated = {
                **row,
                "eval": content["eval"],
                "pairs_scorers": content.get("pairs_scorers") or {},
                "evaluations": content.get("evaluations") or [],
                "part_settings": part_settings(content.get("evaluations") or []),  # what made each part's scores
                "outcomes_path": str(Path(row["run_dir"]) / EVALUATED_OUTCOMES),
            }
            found.append(checked(evaluated))
    return found


def read_summaries(sweep_dir: Path) -> list[dict]:
    rows = []
    for job in sorted((p for p in Path(sweep_dir).iterdir() if p.is_dir()), key=_job_key):
        summary, error = RunSummary.read(job), job / ERROR
        if summary.problem:
            rows.append(
                {"status": "failed", "error": f"summary.json unreadable: {summary.problem}", "run_dir": str(job)}
            )
        elif summary.found:  # its outcomes are read from where it is now (a sweep moved or copied), not where it ran
            rows.append(checked({**summary.values, "run_dir": str(job)}))
        elif error.is_file():
            rows.append({"status": "failed", "error": error.read_text().strip(), "run_dir": str(job)})
    return rows
