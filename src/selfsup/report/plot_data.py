"""What the plots show, gathered from the runs without matplotlib: colours, baselines, curves, seed bands."""

from __future__ import annotations

from selfsup.common.names import FIXED_LOSS, HELDOUT_BPB, PAIRS, PROBE, RECORDED_CONFIG, RunSummary
from selfsup.report.model import Run, _finite, _number
from selfsup.results.groups import setting_label

OBJECTIVE_COLORS = {
    "mlm": "#1f77b4",
    "clm": "#d62728",
    "span_corruption": "#2ca02c",
    "prefix_lm": "#9467bd",
    "ul2": "#ff7f0e",
    "bart": "#17becf",
    "fim": "#bcbd22",
}
EXTRA_COLORS = ["#8c564b", "#e377c2", "#7f7f7f", "#aec7e8"]
# matplotlib's tab10, then tab20's lighter shades: one per setting
SETTING_COLORS = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
]  # fmt: skip


def setting_colors(runs: list[Run], keys: list[str]) -> dict[str, str]:
    """{setting (as the verdict names it): colour}, the same in every figure of a report: where each setting is
    its own objective (an objectives sweep), the objective's colour; else SETTING_COLORS in the order the
    settings first appear among the runs."""
    objectives = {setting_of(run, keys): run.objective or "?" for run in runs}  # in the order first seen
    settings = list(objectives)
    if len(set(objectives.values())) == len(settings):
        by_objective = _colors(runs)
        return {label: by_objective[objectives[label]] for label in settings}
    return {label: SETTING_COLORS[i % len(SETTING_COLORS)] for i, label in enumerate(settings)}


def _colors(runs: list[Run]) -> dict[str, str]:
    colors, extra = {}, iter(EXTRA_COLORS * 10)
    for run in runs:
        name = run.objective or "?"
        if name not in colors:
            colors[name] = OBJECTIVE_COLORS.get(name) or next(extra)
    return colors


# ---------------------------------------------------------------------------- baselines
# what an untrained model, or a model that ignores the text, scores: (suffix of the task's key, legend label,
# style); the random-init score is drawn as its mean with a +- sd band
BASELINES = {
    "random_init": "random-init (mean ± sd)",
    "majority": "majority class",
    "unigram": "unigram",
    "bigram": "bigram",
}
METRIC_KEYS = {
    "fixed_loss": FIXED_LOSS,
    "heldout": HELDOUT_BPB,
    "probe": PROBE,
    "pairs": PAIRS,
}  # Run.metrics() names -> logged keys


def fixed_unigram_loss(run: Run) -> float | None:
    """The unigram's loss on the fixed exam's targets: eval/fixed/unigram_loss, else the kinds' unigram losses
    weighted by their fractions (the scored kinds': a span corruption exam's sentinels are out of its loss)
    when every one of them has one."""
    found = run.task_value("eval/fixed/unigram_loss")
    if found is not None:
        return found
    kinds = {
        k.split("/")[2]
        for k in run.logged_keys()
        if k.startswith("eval/fixed/") and k.endswith("/fraction") and k.count("/") == 3
    }
    parts = [
        (run.task_value(f"eval/fixed/{k}/fraction"), run.task_value(f"eval/fixed/{k}/unigram_loss")) for k in kinds
    ]
    if not parts or any(f is None or u is None for f, u in parts):
        return None
    return sum(f * u for f, u in parts)


def run_baselines(run: Run, key: str) -> dict[str, tuple[float, float | None]]:
    """{kind: (value, sd or None)} of the baselines of a logged metric key (eval/<task>/accuracy: random-init and
    majority; eval/pairs/accuracy: random-init, unigram, bigram; eval/fixed/loss: the unigram loss), where
    known."""
    if key == FIXED_LOSS:
        found = fixed_unigram_loss(run)
        return {} if found is None else {"unigram": (found, None)}
    if key == HELDOUT_BPB:
        found = run.task_value("eval/heldout/unigram_bits_per_byte")
        return {} if found is None else {"unigram": (found, None)}
    if not key.endswith("/accuracy"):
        return {}
    task = key.removesuffix("/accuracy")
    out = {}
    for kind in ("random_init", "majority", "unigram", "bigram"):
        value = run.task_value(f"{task}/{kind}_accuracy")
        if _finite(value):
            sd = run.task_value(f"{task}/{kind}_accuracy_sd") if kind == "random_init" else None
            out[kind] = (value, sd if _finite(sd) else None)
    return out


def baselines(runs: list[Run], key: str) -> list[dict]:
    """The baselines of `key` over the runs, one per kind and architecture (random-init differs with the model's
    shape): [{kind, architecture, label, y, sd}], means over the runs that have them; the label names the
    architecture only where the architectures' values differ."""
    values: dict[tuple[str, str], list[tuple[float, float | None]]] = {}
    for run in runs:
        for kind, found in run_baselines(run, key).items():
            values.setdefault((kind, run.architecture or "?"), []).append(found)
    out = []
    for kind in BASELINES:
        archs = {a: v for (k, a), v in values.items() if k == kind}
        means = {
            a: (
                sum(y for y, _ in v) / len(v),
                None if any(sd is None for _, sd in v) else sum(sd for _, sd in v) / len(v),
            )
            for a, v in archs.items()
        }
        if len({round(y, 9) for y, _ in means.values()}) == 1 and len({sd for _, sd in means.values()}) == 1:
            means = {None: next(iter(means.values()))}  # the same for every architecture: one line
        for arch, (y, sd) in means.items():
            label = (
                BASELINES[kind]
                if arch is None
                else f"{BASELINES[kind].split(' (')[0]}, {arch}" + (" (mean ± sd)" if kind == "random_init" else "")
            )
            out.append({"kind": kind, "architecture": arch, "label": label, "y": y, "sd": sd})
    return out


def setting_of(run: Run, keys: list[str]) -> str:
    """A run's setting, seed aside, as the verdict names it: its objective and the swept values (one colour and
    legend entry each)."""
    return setting_label(run.as_summary_row(keys))


T_975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]  # Student's t, 1-10 df


def seed_band(values):
    """The band of a mean over seeds [seeds, points]: (low, high, words): the min-max with 2 seeds, the 95%
    interval of the mean (Student's t) with 3 or more."""
    import numpy as np

    n = len(values)
    if n < 3:
        return values.min(0), values.max(0), "min-max band"
    half = (T_975[n - 2] if n - 1 <= len(T_975) else 1.96) * values.std(0, ddof=1) / np.sqrt(n)
    mean = values.mean(0)
    return mean - half, mean + half, "95% interval of the mean"


def curve_series(runs: list[Run], y_key: str, x_key: str, keys: list[str] | None = None) -> list[dict]:
    """The lines of a curve plot: one per setting (objective and swept values, seed aside). A setting with
    several finished seeds is their mean over the x values they share (else, x differing by seed, evaluation by
    evaluation, x the mean too), with `low`/`high` its band (seed_band: min-max with 2 seeds, the 95% interval
    of the mean with 3 or more); a
    single run, or a run that did not finish (dashed), is its own line.
    [{label, x, y, low, high, dashed, setting}]"""
    import numpy as np

    keys = keys or []
    settings: dict[str, list] = {}
    for run in runs:
        points = run.curve(y_key, x_key)
        if points:
            settings.setdefault(setting_of(run, keys), []).append((run, points))
    series = []
    for label, members in settings.items():
        finished = [m for m in members if m[0].finished]
        for run, points in members:
            if not run.finished or len(members) == 1:
                xs, ys = map(list, zip(*points))
                series.append(
                    {
                        "setting": label,
                        "label": label if len(members) == 1 else None,
                        "x": xs,
                        "y": ys,
                        "low": None,
                        "high": None,
                        "dashed": not run.finished,
                    }
                )
        if len(finished) > 1:
            grid = sorted(set.intersection(*(set(x for x, _ in p) for _, p in finished)))
            if grid:  # the x values the seeds share (tokens seen at a validation)
                values = np.array([[dict(p)[x] for x in grid] for _, p in finished])
            elif len({len(p) for _, p in finished}) == 1:  # x differs by seed (FLOPs of MLM): by evaluation
                grid = list(np.array([[x for x, _ in p] for _, p in finished]).mean(0))
                values = np.array([[y for _, y in p] for _, p in finished])
            else:
                for run, points in finished:
                    xs, ys = map(list, zip(*points))
                    series.append(
                        {
                            "setting": label,
                            "label": f"{label} ({run.label})",
                            "x": xs,
                            "y": ys,
                            "low": None,
                            "high": None,
                            "dashed": False,
                        }
                    )
                continue
            low, high, band = seed_band(values)
            series.append(
                {
                    "setting": label,
                    "label": f"{label} (mean of {len(finished)} seeds, {band})",
                    "x": grid,
                    "y": list(values.mean(0)),
                    "low": list(low),
                    "high": list(high),
                    "dashed": False,
                }
            )
    return series


def trial_baseline(trial) -> tuple[float, float | None] | None:
    """A trial's random-init (mean, sd) of the optimized metric: its user attrs random_init, random_init_sd
    (the sweeper's), else its run's summary.json (eval/<task>/random_init_<metric> of the run's
    optimized_metric); None where unknown."""
    attrs = trial.user_attrs
    if _finite(_number(attrs.get("random_init"))):
        sd = _number(attrs.get("random_init_sd"))
        return _number(attrs["random_init"]), sd if _finite(sd) else None
    if not attrs.get("run_dir"):
        return None
    try:
        from pathlib import Path

        from omegaconf import OmegaConf

        run_dir = Path(attrs["run_dir"])
        metric = OmegaConf.load(run_dir / RECORDED_CONFIG).get("optimized_metric")
        evaluated = RunSummary.read(run_dir).values.get("eval") or {}
    except Exception:  # noqa: BLE001 - a moved or unfinished run: no baseline, the rest of the plot stands
        return None
    if not isinstance(metric, str) or not metric.startswith("eval/") or metric.count("/") != 2:
        return None
    task, name = metric.rsplit("/", 1)
    mean, sd = (
        _number(evaluated.get(f"{task}/random_init_{name}")),
        _number(evaluated.get(f"{task}/random_init_{name}_sd")),
    )
    return (mean, sd if _finite(sd) else None) if _finite(mean) else None


def run_point(run: Run, metric: str) -> tuple[float, float, float]:
    """A run's final value of a metric (a key of Run.metrics()) and the ends of its 95% interval, the one the
    verdict reads (Run.interval; the value at both ends where it has none)."""
    value = run.metrics()[metric]
    found = run.interval(METRIC_KEYS[metric])
    return (value, value, value) if found is None else (value, *found)
