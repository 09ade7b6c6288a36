"""`--wandb`: the same panels as a W&B Report (wandb-workspaces), or the `wandb sync` command for offline runs."""

from __future__ import annotations

import shlex

from selfsup.common.wandb_utils import api_key_configured
from selfsup.report.model import MASK_RATE, SPAN_LENGTH, ReportError, Run, _number
from selfsup.report.notes import COMPARISON_NOTE, VALUES_NOTE, _counts, _title, code_line
from selfsup.report.plot_data import _colors


def build_wandb_report(runs: list[Run], keys: list[str], entity: str, project: str):
    """The W&B Report with the same panels as the local report (a wandb_workspaces Report; not saved)."""
    try:  # wandb-workspaces is imported here, not at the top: it is an optional extra (`sweep`)
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
        filters = (
            [expr.Metric("Group") == group]
            if group
            else [expr.Metric("ID").isin([r.wandb_record["run_id"] for r in members])]
        )
        runsets.append(
            wr.Runset(
                entity=entity,
                project=project,
                name=group or "runs",
                filters=filters,
                run_settings={
                    r.wandb_record["run_id"]: wr.RunSettings(color=colors[r.objective or "?"]) for r in members
                },
                pinned_columns=[
                    "summary:eval/probe/accuracy",
                    "summary:eval/fixed/loss",
                    "summary:val/loss",
                    "summary:val/signal_per_token",
                    "summary:perf/tokens_per_sec",
                ],
            )
        )
    panels = [
        wr.LinePlot(
            title="val loss against tokens seen (colored by objective)",
            x="train/tokens_seen",
            y=["val/loss"],
            title_x="tokens seen",
            title_y="val loss",
            layout=wr.Layout(x=0, y=0, w=12, h=8),
        ),
        wr.LinePlot(
            title="val loss against tokens seen, per objective (mean, min-max over runs)",
            x="train/tokens_seen",
            y=["val/loss"],
            groupby=wr.Config("objective.name"),
            groupby_aggfunc="mean",
            groupby_rangefunc="minmax",
            layout=wr.Layout(x=12, y=0, w=12, h=8),
        ),
        wr.BarPlot(
            title="probe accuracy per objective, beside its random-init baseline (mean, min-max over runs)",
            metrics=["eval/probe/accuracy", "eval/probe/random_init_accuracy"],
            groupby=wr.Config("objective.name"),
            groupby_aggfunc="mean",
            groupby_rangefunc="minmax",
            layout=wr.Layout(x=0, y=8, w=12, h=8),
        ),
        wr.LinePlot(
            title="probe accuracy against training FLOPs",
            x="train/flops_seen",
            y=["eval/probe/accuracy"],
            title_x="training FLOPs",
            title_y="probe accuracy",
            layout=wr.Layout(x=12, y=8, w=12, h=8),
        ),
    ]
    panels.append(
        wr.LinePlot(
            title="train loss against tokens seen (each run on its own objective)",
            x="train/tokens_seen",
            y=["train/loss"],
            title_x="tokens seen",
            title_y="train loss",
            smoothing_factor=0.6,
            layout=wr.Layout(x=0, y=16, w=24, h=8),
        )
    )
    finished = [r for r in logged if r.finished]
    y = 24
    for key, name in ((MASK_RATE, "mask rate"), (SPAN_LENGTH, "mean span length")):
        if len({_number(r.config.get(key)) for r in finished if _number(r.config.get(key)) is not None}) >= 2:
            for x, (metric, what) in enumerate(
                (("eval/fixed/loss", "fixed-exam loss"), ("eval/probe/accuracy", "probe accuracy"))
            ):
                panels.append(
                    wr.BarPlot(
                        title=f"final {what} per {name} (mean, min-max over seeds)",
                        metrics=[metric],
                        groupby=wr.Config(key),
                        groupby_aggfunc="mean",
                        groupby_rangefunc="minmax",
                        layout=wr.Layout(x=12 * x, y=y, w=12, h=8),
                    )
                )
            y += 8
    if any(r.predictions for r in logged):  # the last eval/predictions table of every run, stacked
        panels.append(wr.WeavePanelSummaryTable(table_name="eval/predictions", layout=wr.Layout(x=0, y=y, w=24, h=12)))
    sweeps = ", ".join(dict.fromkeys(str(r.sweep) for r in runs))
    blocks = [
        wr.P(
            f"{_counts(runs)} from {sweeps}; W&B groups: {', '.join(g or '-' for g in groups)}; "
            f"swept: {', '.join(keys) or 'nothing'}. {code_line(runs)}"
        ),
        wr.PanelGrid(runsets=runsets, panels=panels),
        wr.H2("How to compare"),
        wr.MarkdownBlock(COMPARISON_NOTE),
        wr.MarkdownBlock(VALUES_NOTE),
    ]
    return wr.Report(
        project=project,
        entity=entity,
        title=_title(runs)[:120],
        description=f"selfsup-report of {sweeps}",
        blocks=blocks,
        width="fluid",
    )


def publish_wandb(runs: list[Run], keys: list[str]) -> int:
    """Publish the W&B Report, or say how to upload offline runs first. Returns the exit status."""
    logged = [r for r in runs if r.wandb_dir is not None]
    if not logged:
        raise ReportError("--wandb: none of these runs logged to W&B (logger=csv or none): nothing to publish")
    offline = [r for r in logged if not r.wandb_online]
    if offline:
        dirs = " ".join(shlex.quote(str(r.wandb_dir)) for r in offline)
        print(
            f"W&B: {len(offline)} of {len(logged)} runs are offline W&B runs, not yet uploaded; "
            f"no W&B report was published. Upload them with:\n  wandb sync {dirs}\n"
            f"then rerun with --wandb to publish the report."
        )
        return 0
    if not api_key_configured():
        raise ReportError(
            "--wandb: no W&B API key configured: run `wandb login` (or set WANDB_API_KEY), then rerun with --wandb"
        )
    missing = [r.label for r in runs if r.wandb_dir is None]
    if missing:
        print(f"W&B: runs without W&B run files are not in the W&B report: {', '.join(missing)}")
    project = next((r.wandb_record.get("project") for r in logged if r.wandb_record.get("project")), "selfsup")
    entity = next((r.wandb_record.get("entity") for r in logged if r.wandb_record.get("entity")), None) or next(
        (r.config.get("logger.entity") for r in logged if r.config.get("logger.entity")), None
    )
    try:
        if not entity:
            import wandb  # here, not at the top: ~0.5 s, and `import selfsup.report` does not load wandb

            entity = wandb.Api().default_entity
        report = build_wandb_report(runs, keys, entity, project).save()
    except ReportError:
        raise
    except Exception as err:  # noqa: BLE001 - network or permission problems, said in one line
        raise ReportError(
            f"--wandb: publishing the W&B report failed: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
        ) from None
    print(f"W&B report: {report.url}")
    return 0
