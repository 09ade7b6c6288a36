"""The report's tables as rows of strings: runs, tasks, generation jobs, evaluated scores, lm-eval, predictions."""

from __future__ import annotations

from datetime import timedelta

from selfsup.common.names import ENCODER, FIXED_LOSS, HELDOUT_BPB
from selfsup.evaluation.generation import NOT_A_WRITER, WRITERS
from selfsup.evaluation.stats import Interval
from selfsup.report.model import Run, _show
from selfsup.results.columns import REPORT_COST, REPORT_LABELS, REPORT_SCORES
from selfsup.results.groups import run_margin
from selfsup.results.settings import brief
from selfsup.results.summary import evaluated_rows, job_names, lm_eval_metrics, task_names
from selfsup.results.verdict import verdict_text


def tasks(runs: list[Run]) -> list[str]:
    """The user's evaluation tasks (eval.tasks.*) the runs logged, beside the built-in probe."""
    return [t for t in task_names(k for run in runs for k in run.logged_keys()) if t != "probe"]


BENCHMARK_SECONDS = 60  # a shorter run's tokens/s is mostly start-up and evaluation: not a throughput figure


def tokens_per_sec(metrics: dict) -> str:
    """`962`, or `962 (not a benchmark: 54 s run)` for a run shorter than a minute."""
    value, wall = metrics["tokens_per_sec"], metrics["wall_seconds"]
    if value is None:
        return "-"
    if wall is not None and wall < BENCHMARK_SECONDS:
        return f"{value:,.0f} (not a benchmark: {wall:.0f} s run)"
    return f"{value:,.0f}"


def table_rows(runs: list[Run], keys: list[str]) -> tuple[list[str], list[list[str]]]:
    keys = [k for k in keys if k not in ("objective", "architecture")]  # columns of their own
    own = tasks(runs)
    header = [
        *(REPORT_LABELS[k] for k in ("run", "objective", "architecture")),
        *keys,
        *(REPORT_LABELS[k] for k in REPORT_SCORES),
        *[f"{t} {c}" for t in own for c in ("acc", "margin")],
        *(REPORT_LABELS[k] for k in (*REPORT_COST, "status", "data")),
    ]
    rows = []
    for run in runs:
        m = run.metrics()
        task_cells = []
        for t in own:
            found = run.task_value(f"eval/{t}/accuracy")
            task_cells += ["-" if found is None else f"{found:.4f}", run.margin(f"eval/{t}/accuracy") or "-"]

        def number(key: str, form: str) -> str:
            return "-" if m[key] is None else format(m[key], form)

        status = run.status if not run.error else f"{run.status}: {run.error}"
        rows.append(
            [
                run.label,
                run.objective or "-",
                run.summary.get("architecture_preset") or run.architecture or "-",
                *[_show(run.value(k)) for k in keys],
                number("val_loss", ".4f"),
                number("val_perplexity", ".2f"),
                run.bounded(FIXED_LOSS) or number("fixed_loss", ".4f"),
                run.bounded(HELDOUT_BPB) or number("heldout", ".4f"),
                number("pairs", ".4f"),
                m["pairs_margin"] or "-",
                number("probe", ".4f"),
                m["probe_margin"] or "-",
                *task_cells,
                number("signal_per_token", ".3f"),
                number("tokens_seen", ",.0f"),
                number("flops_seen", ".2g"),
                number("targets_seen", ",.0f"),
                tokens_per_sec(m),
                "-" if m["wall_seconds"] is None else str(timedelta(seconds=round(m["wall_seconds"]))),
                status,
                run.source,
            ]
        )
    return header, rows


TASK_COLUMNS = [
    "run", "objective", "accuracy", "macro F1", "majority", "random-init", "margin [95%]", "TF-IDF + LR [95%]",
    "vs TF-IDF [95%]",
]  # fmt: skip


def simple_cells(value) -> list[str]:
    """The simple baseline's accuracy and the run's difference from it, each with its interval (selfsup.evaluation.
    simple), from `value(end)`: the task's recorded value of eval/<task>/<end>; '-' where not recorded."""
    found = [value(f"tfidf_accuracy{end}") for end in ("", "_low", "_high")]
    gap = [value(f"vs_tfidf{end}") for end in ("", "_low", "_high")]
    return [
        "-" if None in found else str(Interval(*found, signed=False)),
        "-" if None in gap else str(Interval(*gap)),
    ]


def task_rows(runs: list[Run], task: str) -> list[list[str]]:
    """[run, objective, accuracy, macro F1, majority, random-init mean +- sd, margin] of each run that has the task."""
    rows = []
    for run in runs:
        get = {
            k: run.task_value(f"eval/{task}/{k}")
            for k in ("accuracy", "macro_f1", "majority_accuracy", "random_init_accuracy", "random_init_accuracy_sd")
        }
        if get["accuracy"] is None:
            continue
        shown = {k: "-" if v is None else f"{v:.4f}" for k, v in get.items()}
        baseline = shown["random_init_accuracy"] + (
            "" if get["random_init_accuracy_sd"] is None else f" +- {get['random_init_accuracy_sd']:.4f}"
        )
        rows.append(
            [
                run.label,
                run.objective or "-",
                shown["accuracy"],
                shown["macro_f1"],
                shown["majority_accuracy"],
                baseline,
                run.margin(f"eval/{task}/accuracy") or "-",
                *simple_cells(lambda end: run.task_value(f"eval/{task}/{end}")),
            ]
        )
    return rows


JOB_COLUMNS = [
    "run",
    "objective",
    "loss",
    "random-init loss",
    "loss margin [95%]",
    "exact match",
    "EM margin [95%]",
    "token F1",
    "random-init F1",
    "F1 margin [95%]",
    "copy-input F1 [95%]",
    "frequent-target F1 [95%]",
]


def bounded(get, key: str) -> str:
    """`0.310 [0.290, 0.330]`: a recorded score and its interval (key_low, key_high), or '-'."""
    found = [get(key + end) for end in ("", "_low", "_high")]
    return "-" if None in found else str(Interval(*found, signed=False))


def job_rows(items: list[tuple], job: str) -> list[list[str]]:
    """JOB_COLUMNS rows of generation job `job`: items are (run label, objective, architecture, get: key -> value
    or None); a run of a family that writes no text says so, one without the job's scores is left out."""
    rows = []
    for label, objective, architecture, get in items:
        if architecture is not None and architecture not in WRITERS:
            rows.append([label, objective or "-", NOT_A_WRITER, *["-"] * (len(JOB_COLUMNS) - 3)])
            continue
        if get(f"eval/{job}/loss") is None:
            continue

        def number(key: str) -> str:
            value = get(f"eval/{job}/{key}")
            return "-" if value is None else f"{value:.4f}"

        def margin(score: str) -> str:
            found = [get(f"eval/{job}/{score}/margin{end}") for end in ("", "_low", "_high")]
            return "-" if None in found else str(Interval(*found))

        rows.append(
            [
                label,
                objective or "-",
                number("loss"),
                number("random_init_loss"),
                margin("loss"),
                number("exact_match"),
                margin("exact_match"),
                number("token_f1"),
                number("random_init_token_f1"),
                margin("token_f1"),
                *(bounded(get, f"eval/{job}/{b}_token_f1") for b in ("copy", "frequent")),
            ]
        )
    return rows


def run_jobs(runs: list[Run]) -> list[tuple[str, list[list[str]]]]:
    """(job, JOB_COLUMNS rows) of each generation job the runs logged during training."""
    items = [(r.label, r.objective, r.summary.get("architecture"), r.task_value) for r in runs]
    return [(job, job_rows(items, job)) for job in job_names(k for run in runs for k in run.logged_keys())]


def summary_rows(runs: list[Run], keys: list[str]) -> list[dict]:
    """The runs' summary rows for the verdict: runs are told apart by their objective and the keys that vary among
    runs of one objective (those that change with the objective, such as its own defaults, say nothing more)."""
    by_objective: dict[tuple, set] = {}
    for run in runs:
        for key in keys:
            by_objective.setdefault((key, run.objective), set()).add(_show(run.value(key)))
    told = [k for k in keys if any(len(v) > 1 for (key, _), v in by_objective.items() if key == k)]
    return [r.as_summary_row(told) for r in runs if r.summary]


def verdict(runs: list[Run], keys: list[str]) -> list[str]:
    """The verdict's lines (selfsup.results.verdict), as the end of a sweep prints them."""
    return verdict_text(summary_rows(runs, keys)).splitlines()


def evaluated(runs: list[Run], keys: list[str]) -> tuple[list[tuple[str, list[str], list[list[str]]]], list[str]]:
    """selfsup-eval's scores of the runs: (task, its columns, its rows) per task (TASK_COLUMNS) and generation job
    (JOB_COLUMNS), and the verdict over them."""
    every = summary_rows(runs, keys)
    rows = evaluated_rows(every)
    labels = {str(r.path): r.label for r in runs}
    tables = []
    for task in task_names(k for row in rows for k in row["eval"]):
        table = []
        for row in rows:
            get = {
                k: row["eval"].get(f"eval/{task}/{k}")
                for k in (
                    "accuracy",
                    "macro_f1",
                    "majority_accuracy",
                    "random_init_accuracy",
                    "random_init_accuracy_sd",
                )
            }
            if get["accuracy"] is None:
                continue
            shown = {k: "-" if v is None else f"{v:.4f}" for k, v in get.items()}
            sd = get["random_init_accuracy_sd"]
            m = run_margin(row, f"eval/{task}")
            table.append(
                [
                    labels.get(row["run_dir"], row["run_dir"]),
                    row.get("objective") or "-",
                    shown["accuracy"],
                    shown["macro_f1"],
                    shown["majority_accuracy"],
                    shown["random_init_accuracy"] + ("" if sd is None else f" +- {sd:.4f}"),
                    "-" if m is None else str(m),
                    *simple_cells(lambda end: row["eval"].get(f"eval/{task}/{end}")),
                    brief((row.get("part_settings") or {}).get(f"eval/{task}")),
                ]
            )
        tables.append((task, [*TASK_COLUMNS, "settings"], table))
    items = [
        (labels.get(row["run_dir"], row["run_dir"]), row.get("objective"), row.get("architecture"), row["eval"].get)
        for row in rows
    ]
    for job in job_names(k for row in rows for k in row["eval"]):
        settings = [brief((r.get("part_settings") or {}).get(f"eval/{job}")) for r in rows]
        by_label = dict(zip((i[0] for i in items), settings))
        tables.append((job, [*JOB_COLUMNS, "settings"], [[*r, by_label.get(r[0], "-")] for r in job_rows(items, job)]))
    tables += lm_eval_tables(rows, labels, [r for r in every if r.get("architecture") == ENCODER])
    return tables, (verdict_text(rows).splitlines() if rows else [])


LM_EVAL_COLUMNS = ["run", "objective", "metric", "value", "stderr", "chance", "random-init", "margin [95%]"]
LM_EVAL_ENCODER = "lm-eval has no backend for encoders"


def lm_eval_tables(
    rows: list[dict], labels: dict, encoders: list[dict]
) -> list[tuple[str, list[str], list[list[str]]]]:
    """(`lm-eval <task>`, LM_EVAL_COLUMNS, rows) per lm-eval task: each run's metrics with lm-eval's stderr,
    random-init's mean +- sd and the margin; each encoder run (of `encoders`: summary rows) says lm-eval does not
    score it."""
    found = lm_eval_metrics(rows)
    tables = []
    for task in dict.fromkeys(t for t, _ in found):
        metrics = [m for t, m in found if t == task]
        table = []
        for row in sorted(
            encoders + rows, key=lambda r: list(labels).index(r["run_dir"]) if r["run_dir"] in labels else 0
        ):
            label, objective = labels.get(row["run_dir"], row["run_dir"]), row.get("objective") or "-"
            if row.get("architecture") == ENCODER:
                if row in encoders:
                    table.append([label, objective, LM_EVAL_ENCODER, *["-"] * (len(LM_EVAL_COLUMNS) - 2)])
                continue
            for metric in metrics:
                key = f"eval/lm_eval/{task}/{metric}"
                get = row["eval"].get
                if get(key) is None:
                    continue
                sd = get(f"eval/lm_eval/{task}/random_init_{metric}_sd")
                base = get(f"eval/lm_eval/{task}/random_init_{metric}")
                level = get(f"eval/lm_eval/{task}/chance_{metric}")
                m = run_margin(row, key)
                table.append(
                    [
                        label,
                        objective,
                        metric,
                        f"{get(key):.4g}",
                        "-" if get(f"{key}_stderr") is None else f"{get(f'{key}_stderr'):.3g}",
                        "-" if level is None else f"{level:.3g}",
                        "-" if base is None else f"{base:.4g}" + ("" if sd is None else f" +- {sd:.3g}"),
                        "-" if m is None else str(m),
                        brief((row.get("part_settings") or {}).get(f"eval/lm_eval/{task}")),
                    ]
                )
        tables.append((f"lm-eval {task}", [*LM_EVAL_COLUMNS, "settings"], table))
    return tables


PREDICTION_COLUMNS = ["run", "example", "input", "target", "prediction", "accuracy"]


def prediction_rows(runs: list[Run], per_run: int = 2, width: int = 160) -> list[list[str]]:
    """[run, example, input (shortened), target, prediction, accuracy] of the first per_run examples of each run."""
    rows = []
    for run in runs:
        for row in run.predictions[:per_run]:
            text = str(row.get("input", ""))
            rows.append(
                [
                    run.label,
                    str(row.get("example", "")),
                    text if len(text) <= width else text[: width - 1] + "…",
                    str(row.get("target", "")),
                    str(row.get("prediction", "")),
                    _show(row.get("accuracy")),
                ]
            )
    return rows


WRITTEN_TABLE = ["job", "run", "example", "source", "reference", "this run wrote", "random-init wrote", "F1"]


def written_rows(runs: list[Run], keys: list[str], width: int = 60) -> list[list[str]]:
    """Each generation job's shown test examples (selfsup-eval's newest evaluation that kept them): [job, run,
    example, source, reference, the run's output, random-init's output, the run's token F1], texts cut to width."""

    def cut(text) -> str:
        text = "-" if text is None else " ".join(str(text).split()) or "(nothing)"
        return text if len(text) <= width else text[: width - 1] + "…"

    labels = {str(r.path): r.label for r in runs}
    out = []
    for row in evaluated_rows(summary_rows(runs, keys)):
        kept = next(
            (e["written_examples"] for e in reversed(row.get("evaluations") or []) if e.get("written_examples")), {}
        )
        for job, examples in kept.items():
            for x in examples:
                shown = [x.get(k) for k in ("source", "reference", "prediction", "random_init")]
                f1 = x.get("token_f1")
                out.append(
                    [job, labels.get(row["run_dir"], row["run_dir"]), str(x.get("example", "")), *map(cut, shown)]
                    + ["-" if f1 is None else f"{f1:.3f}"]
                )
    return sorted(out, key=lambda r: r[0])  # by job, each job's runs in their order


PER_CLASS_TABLE = ["task", "run", "class", "test examples", "accuracy", "F1"]


def per_class_results(runs: list[Run], keys: list[str]) -> dict[str, list[tuple[str, dict]]]:
    """{task: [(run label, its per-class results)]} of selfsup-eval's newest evaluation of each task
    (evaluated.json's per_class: classes, test_examples, accuracy, f1, confusion)."""
    labels = {str(r.path): r.label for r in runs}
    found: dict[str, list[tuple[str, dict]]] = {}
    for row in evaluated_rows(summary_rows(runs, keys)):
        seen = set()
        for evaluation in reversed(row.get("evaluations") or []):
            for task, result in (evaluation.get("per_class") or {}).items():
                if task not in seen and isinstance(result, dict) and result.get("classes"):
                    seen.add(task)
                    found.setdefault(task, []).append((labels.get(row["run_dir"], row["run_dir"]), result))
    return found


def per_class_rows(found: dict[str, list[tuple[str, dict]]]) -> list[list[str]]:
    """[task, run, class, test examples, accuracy, F1] of each task's classes, for each run."""
    shown = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731 - None: no test example of the class
    return [
        [task, label, str(c), str(n), shown(a), shown(f)]
        for task, results in found.items()
        for label, r in results
        for c, n, a, f in zip(r["classes"], r["test_examples"], r["accuracy"], r["f1"])
    ]
