"""Run summaries and reports.

`summary_table` / `read_summaries`: the table printed at the end of a run or sweep.

`selfsup-report SWEEP_DIR [SWEEP_DIR ...]`: one report of one or more sweeps (or single runs) —
a table with a row per run and the values each sweep varies, and plots of val loss against tokens
seen, mask rate and mean span length — as one self-contained HTML file (default) or Markdown with
PNG files beside it; `--wandb` publishes the same panels as a W&B Report.

    selfsup-report outputs/multirun/<date>/<time>
    selfsup-report SWEEP_A SWEEP_B --format md --out comparison/report.md
    selfsup-report outputs/multirun/<date>/<time> --wandb

Every metric value is read from what the run logged: its W&B run files (offline runs, read with
`wandb leet inspect`), the W&B API (online runs), else its CSV log.
"""

from __future__ import annotations

import argparse
import base64
import csv
import html
import io
import json
import math
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

COLUMNS = [("objective", "objective"), ("architecture", "architecture"), ("parameters", "params"),
           ("steps", "steps"), ("val_loss", "val loss"), ("val_perplexity", "val ppl"),
           ("signal_per_token", "signal/token"), ("tokens_per_sec", "tokens/s"), ("status", "status"),
           ("run_dir", "run dir")]


def _fmt(key: str, value) -> str:
    if value is None:
        return "-"
    if key == "parameters":
        return f"{value / 1e6:.2f}M"
    if key == "tokens_per_sec":
        return f"{value:,.0f}"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def summary_table(rows: list[dict]) -> str:
    cells = [[title for _, title in COLUMNS]] + [[_fmt(k, r.get(k)) for k, _ in COLUMNS] for r in rows]
    width = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(row, width)).rstrip() for row in cells]
    lines.insert(1, "-+-".join("-" * w for w in width))
    return "\n".join(lines)


def _job_key(path: Path):
    return (len(path.name), path.name)


def read_summaries(sweep_dir: Path) -> list[dict]:
    rows = []
    for job in sorted((p for p in Path(sweep_dir).iterdir() if p.is_dir()), key=_job_key):
        summary, error = job / "summary.json", job / "error.txt"
        if summary.is_file():
            rows.append(json.loads(summary.read_text()))
        elif error.is_file():
            rows.append({"status": "failed", "error": error.read_text().strip(), "run_dir": str(job)})
    return rows


# ============================================================================ selfsup-report
class ReportError(Exception):
    """A problem the user can fix; printed as one line `error: ...`, exit status 2."""


# Objective knobs each objective actually uses: the others are shown as n/a and never group plots.
OBJECTIVE_KEYS = {
    "mlm": {"objective.mask_rate", "objective.mask_token_prob", "objective.random_token_prob",
            "objective.whole_word"},
    "span_corruption": {"objective.mask_rate", "objective.mean_span_length"},
    "ul2": {"objective.denoisers", "objective.mode_tokens"},
    "clm": set(),
    "prefix_lm": set(),
}
# Config keys that differ between runs without changing what was trained.
IGNORED_KEYS = {"objective.name", "architecture.name", "data.cache_dir", "data.num_workers", "trainer.progress_bar",
                "trainer.checkpoint_every_n_steps"}
IGNORED_PREFIXES = ("logger.", "hydra.")
MASK_RATE, SPAN_LENGTH, SEED = "objective.mask_rate", "objective.mean_span_length", "seed"
OBJECTIVE_COLORS = {"mlm": "#1f77b4", "clm": "#d62728", "span_corruption": "#2ca02c", "prefix_lm": "#9467bd",
                    "ul2": "#ff7f0e"}
EXTRA_COLORS = ["#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]

PERPLEXITY_NOTE = (
    "Perplexity is e^loss averaged over the positions an objective scores, and the objectives score "
    "different positions, so perplexities of different objectives are not directly comparable: "
    "MLM scores only the ~15% hidden tokens (the mask rate), each predicted with both sides visible; "
    "CLM scores every next token, predicted from its left context only; span corruption scores the "
    "dropped spans and their sentinel tokens, written by the decoder (prefix LM: the continuation after a "
    "prefix seen both ways; UL2: a mixture of these). A lower MLM than CLM perplexity does not make a "
    "better model. Compare perplexities within one objective (across mask rates, span lengths, seeds); "
    "across objectives, read them together with the signal per token shown beside them: scored targets "
    "÷ input tokens on the validation batches, i.e. how much training signal each token of text gives "
    "(MLM ≈ the mask rate, CLM ≈ 1).")
VALUES_NOTE = (
    "Values are the last ones each run logged: val loss = the last logged val/loss, val ppl = the last "
    "val/perplexity, signal/token = the last val/signal_per_token, tokens seen = the last train/tokens_seen, "
    "tokens/s = the last perf/tokens_per_sec (training throughput over the last logging window). "
    "Source (column data): W&B run files (offline runs, read with `wandb leet inspect`), the W&B API (online "
    "runs), else csv/metrics.csv, else (logger=none) the final values in summary.json.")


@dataclass
class Run:
    label: str
    path: Path
    sweep: Path
    status: str = "unknown"
    error: str | None = None
    objective: str | None = None
    architecture: str | None = None
    config: dict = field(default_factory=dict)       # flattened .hydra/config.yaml
    history: list[dict] = field(default_factory=list)
    source: str = "-"                                # wandb-file | wandb-api | csv | summary.json | -
    wandb_dir: Path | None = None
    wandb_online: bool = False                       # an online run, or an offline one already synced
    wandb_record: dict = field(default_factory=dict)  # the run record: run_id, run_group, project, entity, ...
    note: str | None = None

    def last(self, *keys: str) -> float | None:
        """The last logged value of the first of `keys` that was logged."""
        for key in keys:
            for item in reversed(self.history):
                value = _number(item.get(key))
                if value is not None:
                    return value
        return None

    @property
    def finished(self) -> bool:
        return self.status == "finished"

    def metrics(self) -> dict:
        return {"val_loss": self.last("val/loss"), "val_perplexity": self.last("val/perplexity"),
                "signal_per_token": self.last("val/signal_per_token", "train/signal_per_token"),
                "tokens_seen": self.last("train/tokens_seen"), "tokens_per_sec": self.last("perf/tokens_per_sec")}

    def val_curve(self) -> list[tuple[float, float]]:
        points = []
        for item in self.history:
            loss, tokens = _number(item.get("val/loss")), _number(item.get("train/tokens_seen"))
            if _finite(loss) and _finite(tokens):
                points.append((tokens, loss))
        return points

    def value(self, key: str):
        """A config value; n/a for an objective knob this run's objective does not use."""
        if key.startswith("objective.") and self.objective in OBJECTIVE_KEYS and key not in OBJECTIVE_KEYS[self.objective]:
            return "n/a"
        return self.config.get(key)


def _number(value) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)  # NaN and inf too: a diverged run's last logged loss is NaN, and says so
    except (TypeError, ValueError):
        return None


def _finite(value) -> bool:
    return value is not None and math.isfinite(value)


# ---------------------------------------------------------------------------- finding runs
def _is_run_dir(path: Path) -> bool:
    return (path / "summary.json").is_file() or (path / "error.txt").is_file()


def _is_job_dir(path: Path) -> bool:
    return _is_run_dir(path) or (path / ".hydra" / "config.yaml").is_file()


def find_runs(paths: list[str]) -> list[Run]:
    """Every job of every sweep dir (or the run of a single-run dir), in job order."""
    found: list[tuple[Path, Path]] = []
    for arg in paths:
        path = Path(arg)
        if not path.exists():
            raise ReportError(f"{arg} does not exist: pass a sweep dir of selfsup-train -m "
                              f"(outputs/multirun/<date>/<time>) or a run dir (outputs/<date>/<time>)")
        if not path.is_dir():
            raise ReportError(f"{arg} is a file, not a sweep or run dir: pass the folder that holds the jobs")
        if _is_run_dir(path):
            found.append((path.parent, path))
            continue
        jobs = sorted((p for p in path.iterdir() if p.is_dir() and _is_job_dir(p)), key=_job_key)
        if not jobs and (path / ".hydra" / "config.yaml").is_file():
            jobs, path = [path], path.parent  # a run that wrote no summary yet
        if not jobs:
            raise ReportError(f"{arg} is not a sweep or run dir of selfsup-train: no summary.json or error.txt in it "
                              f"or in its job folders")
        found += [(path, job) for job in jobs]
    seen: set[Path] = set()
    found = [(sweep, job) for sweep, job in found if not (job.resolve() in seen or seen.add(job.resolve()))]
    sweeps = list(dict.fromkeys(sweep.resolve() for sweep, _ in found))
    runs = [Run(label=job.name if len(sweeps) == 1 else f"{sweep.name}/{job.name}", path=job, sweep=sweep)
            for sweep, job in found]
    labels = [r.label for r in runs]
    for i, run in enumerate(runs):
        if labels.count(run.label) > 1:  # two sweep dirs of the same name
            run.label = f"{i}:{run.label}"
    return runs


# ---------------------------------------------------------------------------- reading a run
def _flatten(tree, prefix: str = "") -> dict:
    flat = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict) and value:
                flat.update(_flatten(value, name + "."))
            else:
                flat[name] = value
    return flat


def _read_config(job: Path) -> dict:
    import yaml
    path = job / ".hydra" / "config.yaml"
    if not path.is_file():
        return {}
    try:
        return _flatten(yaml.safe_load(path.read_text()) or {})
    except yaml.YAMLError:
        return {}


def _wandb_run_dir(job: Path, summary: dict) -> Path | None:
    """The W&B run folder inside the job dir: the one summary.json names, else the newest (only inside the
    job dir, so that a copied or moved sweep reads its own files)."""
    wandb_dir = job / "wandb"
    if not wandb_dir.is_dir():
        return None
    runs = [p for p in wandb_dir.iterdir() if p.is_dir() and not p.is_symlink()
            and p.name.startswith(("offline-run-", "run-")) and any(p.glob("*.wandb"))]
    named = [p for p in runs if summary.get("wandb_dir") and p.name == Path(summary["wandb_dir"]).name]
    return (named or sorted(runs, key=lambda p: p.name.split("-", 2)[-1]))[-1] if runs else None


def _uploaded(wandb_dir: Path) -> bool:
    """An online run, or an offline run that `wandb sync` has uploaded (it leaves a .wandb.synced marker)."""
    return wandb_dir.name.startswith("run-") or any(wandb_dir.glob("*.wandb.synced"))


def inspect_wandb(wandb_dir: Path) -> tuple[dict, list[dict]]:
    """The run record and the history rows of W&B run files, read with wandb's own inspector."""
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(wandb_dir)],
                         check=False, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}")
    record, history = {}, []
    for line in out.stdout.splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        if item.get("type") == "run":
            record = item["run"]
        elif item.get("type") == "history":
            history.append(item["history"].get("item", {}))
    return record, history


_API_FAILED: list[str] = []


def api_history(record: dict) -> list[dict]:
    """The history of an online run from the W&B API."""
    import wandb
    api = wandb.Api(timeout=30)
    entity = record.get("entity") or api.default_entity
    run = api.run(f"{entity}/{record.get('project') or 'selfsup'}/{record['run_id']}")
    return [dict(row) for row in run.scan_history()]


def fill_tokens_seen(history: list[dict], step_key: str) -> list[dict]:
    """Give each validation row the train/tokens_seen of its step: the train row of the same global step,
    else the last one logged before it (what W&B's step_sync fills in, when it does: not every W&B run
    has it in its val rows, and CSV val rows never do)."""
    by_step, tokens = {}, None
    for row in history:  # the training step's own rows (W&B's step_sync also copies the value into other rows)
        if _number(row.get("train/tokens_seen")) is not None and "train/loss" in row and row.get(step_key) is not None:
            by_step[row[step_key]] = row["train/tokens_seen"]
    for row in history:
        if _number(row.get("train/tokens_seen")) is not None:
            tokens = row["train/tokens_seen"]
        elif any(k.startswith("val/") for k in row):
            filled = by_step.get(row.get(step_key), tokens)
            if filled is not None:
                row["train/tokens_seen"] = filled
    return history


def csv_history(job: Path) -> list[dict]:
    """csv/metrics.csv (Lightning's CSVLogger) as history rows."""
    path = job / "csv" / "metrics.csv"
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        rows = [{k: float(v) for k, v in raw.items() if k and v not in (None, "") and _number(v) is not None}
                for raw in csv.DictReader(f)]
    return fill_tokens_seen(rows, "step")


def load_run(run: Run) -> Run:
    job = run.path
    summary = {}
    if (job / "summary.json").is_file():
        try:
            summary = json.loads((job / "summary.json").read_text())
        except json.JSONDecodeError:
            run.note = "summary.json unreadable"
    error_file = job / "error.txt"
    run.status = summary.get("status") or ("failed" if error_file.is_file() else "incomplete")
    if run.status != "finished":
        error = error_file.read_text().strip() if error_file.is_file() else summary.get("error")
        if not error and (job / "traceback.txt").is_file():
            lines = (job / "traceback.txt").read_text().strip().splitlines()
            error = lines[-1] if lines else None
        if error and error.startswith("error: "):
            error = error[len("error: "):]
        run.error = error or ("no summary.json: still running, or killed" if run.status == "incomplete" else None)
    run.config = _read_config(job)
    run.objective = summary.get("objective") or run.config.get("objective.name")
    run.architecture = summary.get("architecture") or run.config.get("architecture.name")

    run.wandb_dir = _wandb_run_dir(job, summary)
    problems = []
    if run.wandb_dir is not None:
        run.wandb_online = _uploaded(run.wandb_dir)
        try:
            run.wandb_record, history = inspect_wandb(run.wandb_dir)
        except Exception as err:  # noqa: BLE001 - a damaged run file: fall back to the CSV
            problems.append(f"W&B run files unreadable ({err})")
            history = []
        if run.wandb_dir.name.startswith("run-") and run.wandb_record.get("run_id"):
            try:
                if _API_FAILED:
                    raise RuntimeError(_API_FAILED[0])
                run.history, run.source = api_history(run.wandb_record), "wandb-api"
            except Exception as err:  # noqa: BLE001 - no network or no key: the local copy holds the same rows
                reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                _API_FAILED.append(reason)  # do not wait for it again for each run
                problems.append(f"W&B API unavailable ({reason}): values read from the local W&B run files")
        if not run.history and history:
            run.history, run.source = history, "wandb-file"
    if run.history:
        fill_tokens_seen(run.history, "trainer/global_step")
    else:
        run.history = csv_history(job)
        run.source = "csv" if run.history else "-"
    if not run.history and summary.get("val_loss") is not None:  # logger=none: the values summary.json kept
        run.history = [{"val/loss": summary["val_loss"], "val/perplexity": summary.get("val_perplexity"),
                        "train/signal_per_token": summary.get("signal_per_token"),
                        "train/tokens_seen": summary.get("tokens_seen"),
                        "perf/tokens_per_sec": summary.get("tokens_per_sec")}]
        run.source = "summary.json"
    if not run.config and run.wandb_record.get("config"):
        config = run.wandb_record["config"]
        run.config = _flatten({k: v for k, v in (config.get("update") or config).items() if k != "_wandb"})
    if problems:
        run.note = "; ".join(filter(None, [run.note, *problems]))
    return run


def load_runs(paths: list[str]) -> list[Run]:
    runs = find_runs(paths)
    with ThreadPoolExecutor(max_workers=min(4, len(runs))) as pool:  # the inspector is a subprocess per run
        return list(pool.map(load_run, runs))


# ---------------------------------------------------------------------------- what the sweeps vary
def _key_value(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def swept_keys(runs: list[Run]) -> list[str]:
    """Config keys whose values differ between runs, in config order."""
    keys = list(dict.fromkeys(k for r in runs for k in r.config))
    keys = [k for k in keys if k not in IGNORED_KEYS and not k.startswith(IGNORED_PREFIXES)]
    return [k for k in keys if len({_key_value(r.config.get(k)) for r in runs}) > 1]


def _show(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def table_rows(runs: list[Run], keys: list[str]) -> tuple[list[str], list[list[str]]]:
    header = ["run", "objective", "architecture", *keys, "val loss", "val ppl", "val signal/token",
              "tokens seen", "tokens/s", "status", "data"]
    rows = []
    for run in runs:
        m = run.metrics()
        status = run.status if not run.error else f"{run.status}: {run.error}"
        rows.append([run.label, run.objective or "-", run.architecture or "-", *[_show(run.value(k)) for k in keys],
                     "-" if m["val_loss"] is None else f"{m['val_loss']:.4f}",
                     "-" if m["val_perplexity"] is None else f"{m['val_perplexity']:.2f}",
                     "-" if m["signal_per_token"] is None else f"{m['signal_per_token']:.3f}",
                     "-" if m["tokens_seen"] is None else f"{m['tokens_seen']:,.0f}",
                     "-" if m["tokens_per_sec"] is None else f"{m['tokens_per_sec']:,.0f}",
                     status, run.source])
    return header, rows


# ---------------------------------------------------------------------------- plots
def _colors(runs: list[Run]) -> dict[str, str]:
    colors, extra = {}, iter(EXTRA_COLORS * 10)
    for run in runs:
        name = run.objective or "?"
        if name not in colors:
            colors[name] = OBJECTIVE_COLORS.get(name) or next(extra)
    return colors


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ReportError("selfsup-report needs matplotlib for its plots: pip install matplotlib") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_loss_vs_tokens(runs: list[Run]) -> bytes | None:
    curves = [(run, run.val_curve()) for run in runs]
    curves = [(run, points) for run, points in curves if points]
    if not curves:
        return None
    plt = _pyplot()
    colors = _colors(runs)
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    labelled = set()
    for run, points in curves:
        xs, ys = zip(*points)
        objective = run.objective or "?"
        ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.4, color=colors[objective],
                linestyle="-" if run.finished else "--", alpha=0.85,
                label=None if objective in labelled else objective)
        labelled.add(objective)
        if len(curves) <= 12:
            ax.annotate(run.label, (xs[-1], ys[-1]), xytext=(4, 0), textcoords="offset points", fontsize=7,
                        color=colors[objective], va="center")
    ax.set_xlabel("tokens seen (train/tokens_seen)")
    ax.set_ylabel("val loss")
    ax.set_title("Validation loss against tokens seen (one line per run)")
    ax.grid(alpha=0.3)
    ax.legend(title="objective", fontsize=8)
    return _png(fig)


def _group_label(run: Run, keys: list[str]) -> str:
    parts = [run.objective or "?"] + [f"{k.split('.')[-1]}={_show(run.value(k))}" for k in keys
                                      if run.value(k) != "n/a"]
    return ", ".join(parts)


def plot_loss_vs_knob(runs: list[Run], keys: list[str], x_key: str, objectives: set[str], title: str,
                      xlabel: str) -> bytes | None:
    """Val loss against one config value: one line per setting of the other swept values (seed aside),
    points = mean over seeds, bars = min-max over seeds. None when fewer than 2 distinct x values."""
    chosen = [r for r in runs if r.finished and r.objective in objectives and _finite(r.metrics()["val_loss"])
              and _finite(_number(r.config.get(x_key)))]
    if len({_number(r.config.get(x_key)) for r in chosen}) < 2:
        return None
    other = [k for k in keys if k not in (x_key, SEED)]
    lines: dict[str, dict[float, list[float]]] = {}
    objective_of = {}
    for run in chosen:
        label = _group_label(run, other)
        lines.setdefault(label, {}).setdefault(_number(run.config[x_key]), []).append(run.metrics()["val_loss"])
        objective_of[label] = run.objective
    plt = _pyplot()
    colors = _colors(runs)
    one_objective = len(set(objective_of.values())) == 1
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    same_objective: dict[str, int] = {}
    markers, styles = "osD^v<>ph*", ["-", "--", ":", "-."]
    for i, (label, points) in enumerate(lines.items()):
        xs = sorted(points)
        means = [sum(points[x]) / len(points[x]) for x in xs]
        low = [m - min(points[x]) for x, m in zip(xs, means)]
        high = [max(points[x]) - m for x, m in zip(xs, means)]
        objective = objective_of[label]
        n = same_objective[objective] = same_objective.get(objective, -1) + 1
        # one objective: a color per line; several: the objective's color, a line style per setting
        color = plt.cm.tab10(i % 10) if one_objective else colors[objective]
        ax.errorbar(xs, means, yerr=[low, high], marker=markers[n % len(markers)], capsize=4, linewidth=1.5,
                    linestyle="-" if one_objective else styles[n % len(styles)], color=color, label=label)
        for x in xs:
            ax.scatter([x] * len(points[x]), points[x], s=10, color=color, alpha=0.35, zorder=3)
    counts = {len(v) for points in lines.values() for v in points.values()}
    ax.set_xlabel(xlabel)
    ax.set_ylabel("final val loss")
    if counts == {1}:
        spread = "one run per point"
    else:
        spread = (f"mean over {counts.pop()} seeds" if len(counts) == 1 else "mean over seeds") + ", bars = min-max"
    ax.set_title(f"{title} ({spread})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def make_plots(runs: list[Run], keys: list[str]) -> list[tuple[str, str, bytes]]:
    """[(name, caption, png bytes)]"""
    plots = []
    png = plot_loss_vs_tokens(runs)
    if png:
        plots.append(("val_loss_vs_tokens", ("Validation loss against tokens seen, one line per run, colored by "
                                             "objective (dashed: a run that did not finish)."), png))
    png = plot_loss_vs_knob(runs, keys, MASK_RATE, {"mlm", "span_corruption"}, "Val loss against mask rate",
                            "mask rate (objective.mask_rate)")
    if png:
        plots.append(("val_loss_vs_mask_rate", ("Final validation loss against mask rate, per objective: points are "
                                                "the mean over seeds, error bars the min-max over seeds, faint dots "
                                                "the single runs. Compare within one objective only (see below)."),
                      png))
    png = plot_loss_vs_knob(runs, keys, SPAN_LENGTH, {"span_corruption"}, "Val loss against mean span length",
                            "mean span length (objective.mean_span_length)")
    if png:
        plots.append(("val_loss_vs_span_length", ("Final validation loss of span-corruption runs against mean span "
                                                  "length, one line per mask rate: points are the mean over seeds, "
                                                  "error bars the min-max. (UL2 sets its span lengths in "
                                                  "objective.denoisers, so it is not on this plot.)"), png))
    return plots


# ---------------------------------------------------------------------------- writing
def _title(runs: list[Run]) -> str:
    sweeps = list(dict.fromkeys(str(r.sweep) for r in runs))
    return "selfsup report: " + ", ".join(sweeps)


def _counts(runs: list[Run]) -> str:
    failed = sum(not r.finished for r in runs)
    return f"{len(runs)} run{'s' if len(runs) != 1 else ''}" + (f", {failed} not finished" if failed else "")


CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2em auto; max-width: 1200px;
       color: #222; padding: 0 1em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.failed td { background: #fdecea; }
figure { margin: 1.5em 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #555; }
.note { background: #f7f7ff; border-left: 4px solid #88a; padding: 0.6em 1em; }
code { background: #f3f3f3; padding: 0 0.2em; }
"""

NUMERIC = {"val loss", "val ppl", "val signal/token", "tokens seen", "tokens/s"}


def render_html(runs: list[Run], keys: list[str], plots: list[tuple[str, str, bytes]]) -> str:
    esc = html.escape
    header, rows = table_rows(runs, keys)
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = []
    for run, row in zip(runs, rows):
        cells = []
        for name, cell in zip(header, row):
            title = ""
            if name == "run":
                bits = [str(run.path)] + ([f"W&B: {run.wandb_record['display_name']}"]
                                          if run.wandb_record.get("display_name") else [])
                title = f' title="{esc(" | ".join(bits))}"'
            cls = ' class="num"' if name in NUMERIC else ""
            cells.append(f"<td{cls}{title}>{esc(cell)}</td>")
        body.append(f'<tr class="{"finished" if run.finished else "failed"}">{"".join(cells)}</tr>')
    figures = "\n".join(
        f'<figure id="{esc(name)}"><img alt="{esc(name)}" src="data:image/png;base64,'
        f'{base64.b64encode(png).decode("ascii")}"><figcaption>{esc(caption)}</figcaption></figure>'
        for name, caption, png in plots)
    notes = [f"<li><b>{esc(r.label)}</b>: {esc(r.note)}</li>" for r in runs if r.note]
    swept = ", ".join(f"<code>{esc(k)}</code>" for k in keys) or "nothing (one configuration)"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(_title(runs))}</title>
<style>{CSS}</style></head>
<body>
<h1>{esc(_title(runs))}</h1>
<p>{esc(_counts(runs))}; swept: {swept}. Written {datetime.now().strftime("%Y-%m-%d %H:%M")}.</p>
<h2>Runs</h2>
<table id="runs"><thead><tr>{head}</tr></thead><tbody>
{chr(10).join(body)}
</tbody></table>
<p class="small">{esc(VALUES_NOTE)}</p>
{"<ul>" + "".join(notes) + "</ul>" if notes else ""}
<h2>Perplexity across objectives</h2>
<p class="note">{esc(PERPLEXITY_NOTE)}</p>
<h2>Plots</h2>
{figures or "<p>No validation values were logged: nothing to plot.</p>"}
</body></html>
"""


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(runs: list[Run], keys: list[str], plots: list[tuple[str, str, bytes]], out: Path) -> tuple[str, list[Path]]:
    header, rows = table_rows(runs, keys)
    lines = [f"# {_title(runs)}", "",
             f"{_counts(runs)}; swept: {', '.join(f'`{k}`' for k in keys) or 'nothing (one configuration)'}.", "",
             "## Runs", "",
             "| " + " | ".join(_md_cell(h) for h in header) + " |",
             "|" + "|".join("---:" if h in NUMERIC else "---" for h in header) + "|"]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    lines += ["", VALUES_NOTE, ""]
    lines += [f"- **{r.label}**: {r.note}" for r in runs if r.note]
    lines += ["", "## Perplexity across objectives", "", PERPLEXITY_NOTE, "", "## Plots", ""]
    files = []
    for name, caption, png in plots:
        path = out.with_name(f"{out.stem}-{name}.png")
        path.write_bytes(png)
        files.append(path)
        lines += [f"![{name}]({path.name})", "", f"*{caption}*", ""]
    if not plots:
        lines += ["No validation values were logged: nothing to plot.", ""]
    return "\n".join(lines), files


# ---------------------------------------------------------------------------- W&B
def _api_key_configured() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    from urllib.parse import urlparse
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return netrc.is_file() and host in netrc.read_text(errors="ignore")


def build_wandb_report(runs: list[Run], keys: list[str], entity: str, project: str):
    """The W&B Report with the same panels as the local report (a wandb_workspaces Report; not saved)."""
    try:
        import wandb_workspaces.reports.v2 as wr
        from wandb_workspaces import expr
    except ImportError:
        raise ReportError("--wandb needs wandb-workspaces: pip install wandb-workspaces") from None
    logged = [r for r in runs if r.wandb_record.get("run_id")]
    groups = list(dict.fromkeys(r.wandb_record.get("run_group") for r in logged))
    colors = _colors(runs)
    runsets = []
    for group in groups:
        members = [r for r in logged if r.wandb_record.get("run_group") == group]
        filters = [expr.Metric("Group") == group] if group else [
            expr.Metric("ID").isin([r.wandb_record["run_id"] for r in members])]
        runsets.append(wr.Runset(
            entity=entity, project=project, name=group or "runs", filters=filters,
            run_settings={r.wandb_record["run_id"]: wr.RunSettings(color=colors[r.objective or "?"]) for r in members},
            pinned_columns=["summary:val/loss", "summary:val/perplexity", "summary:val/signal_per_token",
                            "summary:perf/tokens_per_sec"]))
    panels = [
        wr.LinePlot(title="val loss against tokens seen (colored by objective)", x="train/tokens_seen", y=["val/loss"],
                    title_x="tokens seen", title_y="val loss", layout=wr.Layout(x=0, y=0, w=12, h=8)),
        wr.LinePlot(title="val loss against tokens seen, per objective (mean, min-max over runs)",
                    x="train/tokens_seen", y=["val/loss"], groupby=wr.Config("objective.name"),
                    groupby_aggfunc="mean", groupby_rangefunc="minmax", layout=wr.Layout(x=12, y=0, w=12, h=8)),
        wr.BarPlot(title="val perplexity (not comparable across objectives) and signal per token",
                   metrics=["val/perplexity", "val/signal_per_token"], groupby=wr.Config("objective.name"),
                   groupby_aggfunc="mean", groupby_rangefunc="minmax", layout=wr.Layout(x=0, y=8, w=12, h=8)),
    ]
    finished = [r for r in logged if r.finished]
    y = 8
    for key, name in ((MASK_RATE, "mask rate"), (SPAN_LENGTH, "mean span length")):
        if len({_number(r.config.get(key)) for r in finished if _number(r.config.get(key)) is not None}) >= 2:
            panels.append(wr.ScatterPlot(title=f"final val loss against {name} (one point per run and seed)",
                                         x=wr.Config(key), y=wr.SummaryMetric("val/loss"),
                                         layout=wr.Layout(x=12 if y == 8 else 0, y=y, w=12, h=8)))
            panels.append(wr.BarPlot(title=f"final val loss per {name} (mean, min-max over seeds)",
                                     metrics=["val/loss"], groupby=wr.Config(key), groupby_aggfunc="mean",
                                     groupby_rangefunc="minmax", layout=wr.Layout(x=0 if y == 8 else 12, y=y + 8,
                                                                                   w=12, h=8)))
            y += 16
    sweeps = ", ".join(dict.fromkeys(str(r.sweep) for r in runs))
    blocks = [
        wr.P(f"{_counts(runs)} from {sweeps}; W&B groups: {', '.join(g or '-' for g in groups)}; "
             f"swept: {', '.join(keys) or 'nothing'}."),
        wr.PanelGrid(runsets=runsets, panels=panels),
        wr.H2("Perplexity across objectives"),
        wr.MarkdownBlock(PERPLEXITY_NOTE),
        wr.MarkdownBlock(VALUES_NOTE),
    ]
    return wr.Report(project=project, entity=entity, title=_title(runs)[:120],
                     description=f"selfsup-report of {sweeps}", blocks=blocks, width="fluid")


def publish_wandb(runs: list[Run], keys: list[str]) -> int:
    """Publish the W&B Report, or say how to upload offline runs first. Returns the exit status."""
    logged = [r for r in runs if r.wandb_dir is not None]
    if not logged:
        raise ReportError("--wandb: none of these runs logged to W&B (logger=csv or none): nothing to publish")
    offline = [r for r in logged if not r.wandb_online]
    if offline:
        dirs = " ".join(shlex.quote(str(r.wandb_dir)) for r in offline)
        print(f"W&B: {len(offline)} of {len(logged)} runs are offline W&B runs, not yet uploaded; "
              f"no W&B report was published. Upload them with:\n  wandb sync {dirs}\n"
              f"then rerun with --wandb to publish the report.")
        return 0
    if not _api_key_configured():
        raise ReportError("--wandb: no W&B API key configured: run `wandb login` (or set WANDB_API_KEY), "
                          "then rerun with --wandb")
    missing = [r.label for r in runs if r.wandb_dir is None]
    if missing:
        print(f"W&B: runs without W&B run files are not in the W&B report: {', '.join(missing)}")
    project = next((r.wandb_record.get("project") for r in logged if r.wandb_record.get("project")), "selfsup")
    entity = next((r.wandb_record.get("entity") for r in logged if r.wandb_record.get("entity")), None) or \
        next((r.config.get("logger.entity") for r in logged if r.config.get("logger.entity")), None)
    try:
        if not entity:
            import wandb
            entity = wandb.Api().default_entity
        report = build_wandb_report(runs, keys, entity, project).save()
    except ReportError:
        raise
    except Exception as err:  # noqa: BLE001 - network or permission problems, said in one line
        raise ReportError(f"--wandb: publishing the W&B report failed: {str(err).splitlines()[0] if str(err) else type(err).__name__}") from None
    print(f"W&B report: {report.url}")
    return 0


# ---------------------------------------------------------------------------- CLI
def parse_args(argv: list[str] | None):
    parser = argparse.ArgumentParser(
        prog="selfsup-report",
        description="Report of selfsup-train sweeps: a table of runs and the values they vary, and plots of val "
                    "loss against tokens seen, mask rate and span length; one self-contained HTML file, or "
                    "Markdown with PNG files.")
    parser.add_argument("sweep_dirs", nargs="+", metavar="SWEEP_DIR",
                        help="a sweep dir of selfsup-train -m (outputs/multirun/<date>/<time>) or a run dir")
    parser.add_argument("--out", help="where to write the report (default: <first SWEEP_DIR>/report.html or .md)")
    parser.add_argument("--format", choices=["html", "md"], help="html (default; plots embedded) or md "
                        "(PNG files beside it); default: from --out's suffix")
    parser.add_argument("--wandb", action="store_true", help="also publish the panels as a W&B Report (online "
                        "runs); for offline runs, print the `wandb sync` command that uploads them")
    return parser.parse_args(argv)


def run_report(args) -> int:
    fmt = args.format or ("md" if args.out and Path(args.out).suffix.lower() in (".md", ".markdown") else "html")
    runs = load_runs(args.sweep_dirs)
    if args.out:
        out = Path(args.out)
        if out.is_dir():
            out = out / f"report.{fmt}"
    else:
        out = Path(args.sweep_dirs[0]) / f"report.{fmt}"
    keys = swept_keys(runs)
    plots = make_plots(runs, keys)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "html":
            out.write_text(render_html(runs, keys, plots), encoding="utf-8")
            files = []
        else:
            text, files = render_markdown(runs, keys, plots, out)
            out.write_text(text, encoding="utf-8")
    except OSError as err:
        raise ReportError(f"cannot write the report to {out}: {err.strerror or err}") from None
    problem = None
    try:
        status = publish_wandb(runs, keys) if args.wandb else 0
    except ReportError as err:  # said after where the local report is
        problem, status = err, 2
    for run in runs:
        if not run.finished:
            print(f"{run.status}: {run.label} ({run.path}): {run.error}")
    print(f"Report ({_counts(runs)}): {out}" + (f"  (plots: {', '.join(p.name for p in files)})" if files else ""))
    if problem:
        raise problem
    return status


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        code = run_report(args)
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    raise SystemExit(code)


if __name__ == "__main__":
    main()
