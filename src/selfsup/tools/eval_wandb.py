"""selfsup-eval's scores in W&B: an evaluation run of their own beside the training run (`job_type="eval"`, in
the training run's group), for every run whose training logged to W&B.

W&B's convention for work that scores a trained model is a run of its own with a `job_type` ("train", "eval")
in the same `group` (wandb.init's job_type and group); W&B's runs table and reports group and filter by both.
Resuming the training run instead would lose data here: W&B cannot resume an offline run (selfsup's runs are
offline unless W&B is configured), and `wandb sync` of a second offline run with the training run's id replaces
the first one's history (wandb/wandb issues 2423, 3841, 5865).

The evaluation run is named `<training run's name>-eval`, in the training run's group (a sweep's; a run outside
a sweep has none), tagged as the training run plus `eval`. Its config is
the training run's with `eval` replaced by the settings that made the scores, and `trained_run_id` (the training
run's W&B id). Its summary holds the scores under evaluated.json's names; its W&B Tables are the lm-eval
results (`eval/lm_eval/results`), each task's per-class results (`eval/<task>/per_class`) and each generation
job's shown test examples with what the run and random-init
wrote (`eval/<job>/predictions`, as the training run logs them). It is
written into the run dir's `wandb/`, in the training run's W&B mode (offline without an API key); the console
line names it and the `wandb sync` command that uploads it, or says why nothing was logged. W&B failing never
loses the scores: they are in evaluated.json first.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from selfsup.common.names import WANDB_IDENTITY, WANDB_RUN_ID

EVALUATED = "evaluated.json"


def lm_eval_table(metrics: dict) -> tuple[list[str], list[list]] | None:
    """The lm-eval metrics as one table: a row per task and metric, its stderr, random-init and margin."""
    rows = []
    for key, value in metrics.items():
        parts = key.split("/")
        if parts[:2] != ["eval", "lm_eval"] or len(parts) != 4:
            continue
        if parts[3].startswith(("random_init_", "chance_")) or parts[3].endswith("_stderr"):
            continue
        got = [metrics.get(f"{key}{end}") for end in ("_stderr", "/margin", "/margin_low", "/margin_high")]
        base, level = (metrics.get(f"eval/lm_eval/{parts[2]}/{k}_{parts[3]}") for k in ("random_init", "chance"))
        rows.append([parts[2], parts[3], value, got[0], level, base, *got[1:]])
    columns = ["task", "metric", "value", "stderr", "chance", "random_init", "margin", "margin_low", "margin_high"]
    return (columns, rows) if rows else None


def log_evaluation(
    run_dir: Path, logger, config: dict, metrics: dict, tables: dict[str, tuple[list[str], list[list]]]
) -> str:
    """The scores (and tables: {key: (columns, rows)}) as a W&B run of job_type eval beside the run's training
    run. Returns the console line's end: where they went, or why they went nowhere ("" where the run logs no W&B
    run at all); W&B failing is said, never raised."""
    from selfsup.common.wandb_utils import api_key_configured, wandb_mode
    from selfsup.reliability.redact import redact, register_secrets

    if not logger.wandb:
        return ""
    mode = wandb_mode(logger.mode or "offline")
    if mode == "disabled":
        return ""
    id_file = run_dir / WANDB_RUN_ID
    if not id_file.is_file():
        return f" (W&B: not logged, {id_file} is missing: the run's W&B id is unknown; the scores are in {EVALUATED})"
    if mode == "online" and not api_key_configured():
        mode = "offline"
    trained = id_file.read_text().strip()
    identity = run_dir / WANDB_IDENTITY
    name, group, tags = json.loads(identity.read_text()) if identity.is_file() else (trained, None, [])
    register_secrets(config)
    try:
        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        run = wandb.init(
            dir=str(run_dir),
            project=logger.project,
            entity=logger.entity,
            mode=mode,
            name=f"{name}-eval",
            group=group,
            job_type="eval",
            tags=[*tags, "eval"],
            config=redact({**config, "trained_run_id": trained}),
        )
        run.summary.update(metrics)
        if tables:
            run.log({key: wandb.Table(columns=columns, data=rows) for key, (columns, rows) in tables.items()})
        run.finish()
    except Exception as err:  # noqa: BLE001 - W&B failing: the scores are in evaluated.json
        return f" (W&B: not logged, {type(err).__name__}: {str(err).splitlines()[0][:120]})"
    where = Path(run.dir).parent  # <run_dir>/wandb/<offline-run-...>/files -> the run's folder
    upload = f"; upload: wandb sync {where}" if mode == "offline" else ""
    grouped = f", group {group}" if group else ""
    return f" and W&B run {run.id} ({mode}, job_type eval{grouped}{upload})"
