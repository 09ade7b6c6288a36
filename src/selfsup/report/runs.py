"""Finding the runs of sweep/run dirs and reading each one: status, config and the history it logged (W&B offline
run files read with `wandb leet inspect`, the W&B API for online runs, else csv/metrics.csv, else summary.json);
and which config keys the runs vary."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from selfsup.common.names import (
    CSV_DIR,
    ERROR,
    METRICS_CSV,
    RECORDED_CONFIG,
    SUMMARY,
    TRACEBACK,
    WANDB_DIR,
    WANDB_RUN_ID,
    RunSummary,
)
from selfsup.report.model import (
    IGNORED_KEYS,
    IGNORED_PREFIXES,
    ReportError,
    Run,
    _number,
)
from selfsup.results.groups import checked
from selfsup.results.summary import _job_key
from selfsup.run.run_dir import command_swept


# ---------------------------------------------------------------------------- finding runs
def _is_run_dir(path: Path) -> bool:
    return (path / SUMMARY).is_file() or (path / ERROR).is_file()


def _is_job_dir(path: Path) -> bool:
    return _is_run_dir(path) or (path / RECORDED_CONFIG).is_file()


def find_runs(paths: list[str]) -> list[Run]:
    """Every job of every sweep dir (or the run of a single-run dir), in job order."""
    found: list[tuple[Path, Path]] = []
    for arg in paths:
        path = Path(arg)
        if not path.exists():
            raise ReportError(
                f"{arg} does not exist: pass a sweep dir of selfsup-train -m "
                f"(outputs/multirun/<date>/<time>) or a run dir (outputs/<date>/<time>)"
            )
        if not path.is_dir():
            raise ReportError(f"{arg} is a file, not a sweep or run dir: pass the folder that holds the jobs")
        if _is_run_dir(path):
            found.append((path.parent, path))
            continue
        jobs = sorted((p for p in path.iterdir() if p.is_dir() and _is_job_dir(p)), key=_job_key)
        if not jobs and (path / RECORDED_CONFIG).is_file():
            jobs, path = [path], path.parent  # a run that wrote no summary yet
        if not jobs:
            raise ReportError(
                f"{arg} is not a sweep or run dir of selfsup-train: no summary.json or error.txt in it "
                f"or in its job folders"
            )
        found += [(path, job) for job in jobs]
    seen: set[Path] = set()
    found = [(sweep, job) for sweep, job in found if not (job.resolve() in seen or seen.add(job.resolve()))]
    sweeps = list(dict.fromkeys(sweep.resolve() for sweep, _ in found))
    runs = [
        Run(label=job.name if len(sweeps) == 1 else f"{sweep.name}/{job.name}", path=job, sweep=sweep)
        for sweep, job in found
    ]
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

    path = job / RECORDED_CONFIG
    if not path.is_file():
        return {}
    try:
        return _flatten(yaml.safe_load(path.read_text()) or {})
    except yaml.YAMLError:
        return {}


def _wandb_run_dirs(job: Path) -> list[Path]:
    """The training run's W&B run folders inside the job dir, oldest first (a resumed run adds one per resume; only
    inside the job dir, so that a copied or moved sweep reads its own files): those of its id (wandb-run-id), not
    selfsup-eval's evaluation runs beside them."""
    wandb_dir = job / WANDB_DIR
    if not wandb_dir.is_dir():
        return []
    id_file = job / WANDB_RUN_ID
    own = id_file.read_text().strip() if id_file.is_file() else None
    runs = [
        p
        for p in wandb_dir.iterdir()
        if p.is_dir()
        and not p.is_symlink()
        and p.name.startswith(("offline-run-", "run-"))
        and (own is None or p.name.endswith(f"-{own}"))
        and any(p.glob("*.wandb"))
    ]
    return sorted(runs, key=lambda p: p.name.split("-", 2)[-1])


def _uploaded(wandb_dir: Path) -> bool:
    """An online run, or an offline run that `wandb sync` has uploaded (it leaves a .wandb.synced marker)."""
    return wandb_dir.name.startswith("run-") or any(wandb_dir.glob("*.wandb.synced"))


def inspect_wandb(wandb_dir: Path) -> tuple[dict, list[dict]]:
    """The run record and the history rows of W&B run files, read with wandb's own inspector."""
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(wandb_dir)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
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


def read_predictions(folders: list[Path]) -> list[dict]:
    """The rows of the newest eval/predictions W&B Table (the last evaluation) in a run's W&B folders."""
    newest: tuple[int, list[dict]] = (-1, [])
    for folder in folders:
        for path in (folder / "files" / "media" / "table" / "eval").glob("predictions_*.table.json"):
            try:
                table = json.loads(path.read_text())
                rows = [dict(zip(table["columns"], row)) for row in table["data"]]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            step = max((int(r.get("step") or 0) for r in rows), default=0)
            if rows and step > newest[0]:
                newest = (step, rows)
    return newest[1]


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
    """csv/metrics.csv (Lightning's CSVLogger) and a resumed run's csv/resume-<n>/metrics.csv, in order, as
    history rows."""
    paths = [job / METRICS_CSV] + sorted(
        (job / CSV_DIR).glob("resume-*/metrics.csv"), key=lambda p: int(p.parent.name.split("-")[1])
    )
    rows = []
    for path in paths:
        if path.is_file():
            with open(path, newline="") as f:
                rows += [
                    {k: float(v) for k, v in raw.items() if k and v not in (None, "") and _number(v) is not None}
                    for raw in csv.DictReader(f)
                ]
    return fill_tokens_seen(rows, "step")


def load_run(run: Run) -> Run:
    job = run.path
    read = RunSummary.read(job)
    summary, corrupt = read.values, read.problem
    wrong = checked({**summary, "run_dir": str(job)}).get("left_out")  # its outcomes where the run is now
    if wrong:  # its scores contradict its outcomes: none shown, the verdict says why
        summary = {**summary, "eval": {}, "left_out": wrong}
        run.note = "; ".join(filter(None, [run.note, f"scores left out: {wrong}"]))
    run.summary = summary
    error_file = job / ERROR
    run.status = summary.get("status") or ("failed" if error_file.is_file() else "incomplete")
    if run.status != "finished":
        error = error_file.read_text().strip() if error_file.is_file() else summary.get("error")
        if not error and (job / TRACEBACK).is_file():
            lines = (job / TRACEBACK).read_text().strip().splitlines()
            error = lines[-1] if lines else None
        if error and error.startswith("error: "):
            error = error[len("error: ") :]
        if corrupt:
            error = "; ".join(
                filter(
                    None, [error, f"summary.json unreadable (corrupt: {corrupt}): killed while writing it, or damaged"]
                )
            )
        run.error = error or ("no summary.json: still running, or killed" if run.status == "incomplete" else None)
    run.config = _read_config(job)
    run.objective = summary.get("objective") or run.config.get("objective.name")
    run.architecture = summary.get("architecture") or run.config.get("architecture.name")

    folders = _wandb_run_dirs(job)
    run.wandb_dir = folders[-1] if folders else None
    problems = []
    history = []
    if run.wandb_dir is not None:
        run.wandb_online = _uploaded(run.wandb_dir)
        try:  # every segment of the run (a resumed run continues in a new folder), in order
            for folder in folders:
                run.wandb_record, segment = inspect_wandb(folder)
                history += segment
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
    run.predictions = read_predictions(folders)
    if run.history:
        fill_tokens_seen(run.history, "trainer/global_step")
    else:
        run.history = csv_history(job)
        run.source = "csv" if run.history else "-"
    if not run.history and summary.get("val_loss") is not None:  # logger=none: the values summary.json kept
        run.history = [
            {
                "val/loss": summary["val_loss"],
                "val/perplexity": summary.get("val_perplexity"),
                "train/signal_per_token": summary.get("signal_per_token"),
                "train/tokens_seen": summary.get("tokens_seen"),
                "perf/tokens_per_sec": summary.get("tokens_per_sec"),
            }
        ]
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


def _setting_keys(runs: list[Run]) -> list[str]:
    keys = list(dict.fromkeys(k for r in runs for k in r.config))
    return [
        k
        for k in keys
        if k not in IGNORED_KEYS and not k.startswith(IGNORED_PREFIXES) and not k.endswith(("._target_", "._convert_"))
    ]  # which class builds a group: named by its name


def swept_keys(runs: list[Run]) -> list[str]:
    """The keys the runs' sweep commands swept (multirun.yaml), else the config keys whose values differ
    between runs, in config order. A swept config group (objective=mlm,clm) is one key: its name."""
    differ = [k for k in _setting_keys(runs) if len({_key_value(r.config.get(k)) for r in runs}) > 1]
    commands = [command_swept(sweep) for sweep in dict.fromkeys(r.sweep for r in runs if r.sweep is not None)]
    if not commands or any(c is None for c in commands):
        return differ
    swept = list(dict.fromkeys(k for c in commands for k in c))
    return [k for k in swept if len({_key_value(r.value(k)) for r in runs}) > 1] or differ


def fixed_settings(runs: list[Run]) -> dict:
    """Config values every run shares (what the report's comparisons hold fixed), in config order."""
    fixed = {}
    for key in _setting_keys(runs):
        values = {_key_value(r.config.get(key)) for r in runs}
        if len(values) == 1 and runs[0].config.get(key) is not None:
            fixed[key] = runs[0].config[key]
    return fixed
