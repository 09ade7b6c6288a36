"""The report's plots (matplotlib, imported only when there is something to plot), as PNG bytes."""

from __future__ import annotations

import io

from selfsup.common.names import FIXED_LOSS, HELDOUT_BPB, PAIRS, PROBE, RunSummary
from selfsup.report.model import (
    MASK_RATE,
    SEED,
    SPAN_LENGTH,
    ReportError,
    Run,
    _finite,
    _number,
)
from selfsup.report.runs import study_importances
from selfsup.results.verdict import setting_label

OBJECTIVE_COLORS = {
    "mlm": "#1f77b4",
    "clm": "#d62728",
    "span_corruption": "#2ca02c",
    "prefix_lm": "#9467bd",
    "ul2": "#ff7f0e",
}
EXTRA_COLORS = ["#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
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


# ---------------------------------------------------------------------------- baselines
# what an untrained model, or a model that ignores the text, scores: (suffix of the task's key, legend label,
# style); the random-init score is drawn as its mean with a +- sd band
BASELINES = {
    "random_init": "random-init (mean ± sd)",
    "majority": "majority class",
    "unigram": "unigram",
    "bigram": "bigram",
}
BASELINE_STYLE = {
    "random_init": ("#555555", "--"),
    "majority": ("#000000", ":"),
    "unigram": ("#8c564b", "-."),
    "bigram": ("#e377c2", (0, (1, 1))),
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


def draw_baselines(ax, found: list[dict], spans: dict | None = None) -> None:
    """Horizontal lines (random-init: its mean, and a +- sd band), labelled for the legend; with `spans`
    ({architecture: [x ranges]}, a plot by setting), each only over its architecture's settings. Their
    artists' gid is `baseline:<kind>`."""
    shades = ["#555555", "#999999", "#222222", "#777777"]
    archs = list(dict.fromkeys(b["architecture"] for b in found))
    for b in found:
        color, style = BASELINE_STYLE[b["kind"]]
        if b["kind"] == "random_init" and b["architecture"] is not None:
            color = shades[archs.index(b["architecture"]) % len(shades)]
        ranges = (spans or {}).get(b["architecture"]) or [None]
        for i, where in enumerate(ranges):
            label = b["label"] if i == 0 else None
            if where is None:
                line = ax.axhline(b["y"], color=color, linestyle=style, linewidth=1.2, label=label, zorder=1)
            else:
                [line] = ax.plot(
                    where, [b["y"]] * 2, color=color, linestyle=style, linewidth=1.5, label=label, zorder=1
                )
            line.set_gid(f"baseline:{b['kind']}")
            if b["sd"]:
                low, high = b["y"] - b["sd"], b["y"] + b["sd"]
                alpha = 0.12 if len(archs) == 1 or where is not None else 0.06  # overlapping bands: fainter
                band = (
                    ax.axhspan(low, high, color=color, alpha=alpha, zorder=0)
                    if where is None
                    else ax.fill_between(where, [low] * 2, [high] * 2, color=color, alpha=alpha, zorder=0)
                )
                band.set_gid(f"baseline:{b['kind']}:band")


def baseline_words(found: list[dict]) -> str:
    """`Baselines: random-init (mean ± sd band), majority class.` for a caption; '' without any."""
    names = list(dict.fromkeys(BASELINES[b["kind"]].replace("(mean ± sd)", "(mean, ± sd band)") for b in found))
    return f" Baselines: {', '.join(names)}." if names else ""


def outside_legend(ax, fontsize: int = 7) -> None:
    """The legend beside the axes, to their right, so that it covers no data."""
    ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)


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


BAND_WORDS = "seeds: their mean, with a band of their min-max (2 seeds) or the 95% interval of the mean (3 or more)"


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


def curves_figure(
    runs: list[Run],
    y_key: str,
    x_key: str,
    ylabel: str,
    xlabel: str,
    title: str,
    keys: list[str] | None = None,
    with_baselines: bool = False,
):
    """y against x (`curve_series`) and the series it left out (a single point: no curve), or (None, left out)
    when no series has two points."""
    series = curve_series(runs, y_key, x_key, keys)
    drawn = [s for s in series if len(s["x"]) > 1]
    left_out = [s["label"] or s["setting"] for s in series if len(s["x"]) <= 1]
    if not drawn:
        return None, left_out
    plt = _pyplot()
    colors = setting_colors(runs, keys or [])
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for line in drawn:
        color = colors[line["setting"]]
        ax.plot(
            line["x"],
            line["y"],
            marker="o",
            markersize=3,
            linewidth=1.5,
            color=color,
            linestyle="--" if line["dashed"] else "-",
            alpha=0.9,
            label=line["label"],
            zorder=3,
        )
        if line["low"] is not None:
            ax.fill_between(line["x"], line["low"], line["high"], color=color, alpha=0.2, zorder=2)
    if with_baselines:
        draw_baselines(ax, baselines(runs, y_key))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    outside_legend(ax)
    return fig, left_out


def plot_loss_vs_tokens(runs: list[Run], keys: list[str] | None = None, key: str = "val/loss") -> bytes | None:
    """A loss against tokens seen, one colour per setting (`curve_series`): seeds as their mean and a band
    (seed_band); a series of one point is left out, and None when none has two."""
    what = "Validation" if key.startswith("val/") else "Training"
    ylabel, xlabel = key.replace("/", " ").replace("_", " "), "tokens seen (train/tokens_seen)"
    fig, _ = curves_figure(runs, key, "train/tokens_seen", ylabel, xlabel, f"{what} loss against tokens seen", keys)
    return None if fig is None else _png(fig)


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
        metric = OmegaConf.load(run_dir / ".hydra" / "config.yaml").get("optimized_metric")
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


def study_history_figure(study):
    """The optimisation history of a study (None under two complete trials): each complete trial's value, with
    its standard error (user attr value_se) as error bars where known, the best so far, the pruned trials, and
    the trials' random-init (mean, +- sd band) where known."""
    from optuna.trial import TrialState

    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    if len(complete) < 2:
        return None
    plt = _pyplot()
    maximize = study.direction.name == "MAXIMIZE"
    fig, ax = plt.subplots(figsize=(7.5, 4.0))
    numbers, values = [t.number for t in complete], [t.value for t in complete]
    best = [max(values[: i + 1]) if maximize else min(values[: i + 1]) for i in range(len(values))]
    se = [_number(t.user_attrs.get("value_se")) for t in complete]
    if any(_finite(v) for v in se):
        errors = [v if _finite(v) else 0.0 for v in se]
        bars = ax.errorbar(
            numbers,
            values,
            yerr=errors,
            fmt="o",
            markersize=4,
            capsize=3,
            color="#1f77b4",
            label="trial value (± its standard error)",
            zorder=3,
        )
        bars[0].set_gid("trial_value")
    else:
        ax.scatter(numbers, values, s=18, color="#1f77b4", label="trial value", zorder=3).set_gid("trial_value")
    ax.step(numbers, best, where="post", color="#d62728", label="best so far", zorder=3)
    known = [(t.number, found) for t in complete if (found := trial_baseline(t)) is not None]
    if known:
        xs, ys = [n for n, _ in known], [b[0] for _, b in known]
        label = "random-init (mean ± sd)" if all(b[1] is not None for _, b in known) else "random-init"
        if len({round(y, 9) for y in ys}) == 1:  # one baseline for every trial: a line across the plot
            draw_baselines(
                ax, [{"kind": "random_init", "architecture": None, "label": label, "y": ys[0], "sd": known[0][1][1]}]
            )
        else:
            [line] = ax.plot(
                xs, ys, color="#555555", linestyle="--", linewidth=1.2, drawstyle="steps-mid", label=label, zorder=1
            )
            line.set_gid("baseline:random_init")
            if all(b[1] is not None for _, b in known):
                ax.fill_between(
                    xs,
                    [y - b[1] for (_, b), y in zip(known, ys)],
                    [y + b[1] for (_, b), y in zip(known, ys)],
                    step="mid",
                    color="#555555",
                    alpha=0.12,
                    zorder=0,
                ).set_gid("baseline:random_init:band")
    pruned = [t.number for t in study.trials if t.state == TrialState.PRUNED]
    if pruned:
        ax.scatter(
            pruned, [min(values)] * len(pruned), marker="x", color="#7f7f7f", label="pruned (at the lowest value)"
        )
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("trial")
    ax.set_ylabel("objective value")
    ax.set_title(f"Optuna study {study.study_name}: optimisation history")
    ax.grid(alpha=0.3)
    outside_legend(ax, 8)
    return fig


def plot_study(study) -> list[tuple[str, str, bytes]]:
    """An Optuna study: its optimisation history (each trial's value and the best so far) and, with two
    complete trials or more, and from runs.MIN_IMPORTANCE_TRIALS complete trials the parameters' importances
    (runs.study_importances). Under two complete trials: a line saying
    the history is not drawn (empty png)."""
    from optuna.trial import TrialState

    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    if not complete:
        return []
    fig = study_history_figure(study)
    if fig is None:
        return [
            (
                "optuna_history",
                (
                    f"Optuna study {study.study_name}: its history is not drawn: one complete "
                    f"trial (value {complete[0].value:.4f})."
                ),
                b"",
            )
        ]
    with_se = any(_finite(_number(t.user_attrs.get("value_se"))) for t in complete)
    with_baseline = any(trial_baseline(t) is not None for t in complete)
    plt = _pyplot()
    plots = [
        (
            "optuna_history",
            f"Optuna study {study.study_name}: each complete trial's value (the jobs' "
            f"optimized metric)"
            + (" with its standard error (its seeds' spread, or the test examples')" if with_se else "")
            + ", the best so far, and the pruned trials."
            + (" Baselines: random-init (mean, ± sd band)." if with_baseline else ""),
            _png(fig),
        )
    ]
    importances, line = study_importances(study)  # None under MIN_IMPORTANCE_TRIALS complete trials
    if importances:
        fig, ax = plt.subplots(figsize=(7.5, 0.5 + 0.45 * len(importances)))
        names = list(importances)[::-1]
        ax.barh(names, [importances[n] for n in names], color="#2ca02c")
        ax.set_xlabel("importance (Optuna's default evaluator)")
        ax.set_title("Which parameters the value depends on")
        plots.append(("optuna_importances", line, _png(fig)))
    return plots


def run_point(run: Run, metric: str) -> tuple[float, float, float]:
    """A run's final value of a metric (a key of Run.metrics()) and the ends of its 95% interval, the one the
    verdict reads (Run.interval; the value at both ends where it has none)."""
    value = run.metrics()[metric]
    found = run.interval(METRIC_KEYS[metric])
    return (value, value, value) if found is None else (value, *found)


def draw_runs(ax, points: list[tuple[float, Run]], metric: str, color: str, label: str | None) -> None:
    """Each run at its x: its value with its 95% interval as whiskers (its marker's gid: `interval`)."""
    for x, run in points:
        value, low, high = run_point(run, metric)
        bars = ax.errorbar(
            [x], [value], yerr=[[value - low], [high - value]], marker="o", markersize=4, capsize=3,
            linestyle="none", color=color, alpha=0.8, zorder=3, label=label,
        )  # fmt: skip
        bars.lines[0].set_gid("interval")
        label = None


def knob_figure(
    runs: list[Run],
    keys: list[str],
    x_key: str,
    objectives: set[str],
    metric: str,
    title: str,
    xlabel: str,
    ylabel: str,
):
    """A final metric (a key of Run.metrics()) against one config value: each run a point with its 95% interval
    (the verdict's) as whiskers, in its setting's colour (setting_colors), a grey line through the means over
    seeds of each line of the other swept values (seed aside), and the metric's baselines (None when fewer than
    2 distinct x values); and whether it is a scatter: when the other swept values differ from run to run (an
    Optuna study's sampled values: every line would be one point), no line joins them."""
    chosen = [
        r
        for r in runs
        if r.finished
        and r.objective in objectives
        and _finite(r.metrics()[metric])
        and _finite(_number(r.config.get(x_key)))
    ]
    if len({_number(r.config.get(x_key)) for r in chosen}) < 2:
        return None, False
    other = [k for k in keys if k not in (x_key, SEED)]
    lines: dict[str, dict[float, list[float]]] = {}
    for run in chosen:
        label = setting_label(run.as_summary_row(other))
        lines.setdefault(label, {}).setdefault(_number(run.config[x_key]), []).append(run.metrics()[metric])
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    scattered = any(len(points) < 2 for points in lines.values())
    colors = setting_colors(runs, keys)
    if not scattered:
        for points in lines.values():
            xs = sorted(points)
            ax.plot(xs, [sum(points[x]) / len(points[x]) for x in xs], color="#888888", linewidth=1.2, zorder=2)
    settings: dict[str, list[Run]] = {}
    for run in chosen:
        settings.setdefault(setting_of(run, keys), []).append(run)
    xs = [_number(r.config[x_key]) for r in chosen]
    step = 0.012 * (max(xs) - min(xs))  # the seeds of a setting side by side, not on top of each other
    for label, members in settings.items():
        shown = label if not scattered or len(settings) <= 10 else None
        at = [_number(r.config[x_key]) for r in members]
        offsets = [(j - (len(members) - 1) / 2) * step if at.count(x) > 1 else 0.0 for j, x in enumerate(at)]
        draw_runs(ax, [(x + o, r) for x, o, r in zip(at, offsets, members)], metric, colors[label], shown)
    draw_baselines(ax, baselines(chosen, METRIC_KEYS[metric]))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    outside_legend(ax, 8)
    return fig, scattered


def setting_figure(runs: list[Run], keys: list[str], metric: str, title: str, ylabel: str):
    """A final metric per setting (objective and swept values, seed aside), the x axis the settings: each run a
    point with its 95% interval (the verdict's) as whiskers, side by side, in its setting's colour, and over each
    setting its architecture's baselines. None unless two objectives or more have it."""
    chosen = [r for r in runs if r.finished and _finite(r.metrics()[metric])]
    if len({r.objective for r in chosen}) < 2:
        return None
    groups: dict[str, list[Run]] = {}
    for run in chosen:
        groups.setdefault(setting_of(run, keys), []).append(run)
    plt = _pyplot()
    colors = setting_colors(runs, keys)
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    spans: dict[str | None, list] = {}
    for i, (label, members) in enumerate(groups.items()):
        offsets = [0.0] if len(members) == 1 else [-0.2 + 0.4 * j / (len(members) - 1) for j in range(len(members))]
        draw_runs(ax, [(i + o, r) for o, r in zip(offsets, members)], metric, colors[label], None)
        spans.setdefault(members[0].architecture or "?", []).append([i - 0.4, i + 0.4])
    found = baselines(chosen, METRIC_KEYS[metric])
    if any(b["architecture"] is None for b in found):  # the same for every architecture: over every setting
        spans[None] = [[i - 0.4, i + 0.4] for i in range(len(groups))]
    draw_baselines(ax, found, spans)
    ax.set_xticks(range(len(groups)), list(groups), rotation=20, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    if found:
        outside_legend(ax, 8)
    return fig


KNOBS = [
    (MASK_RATE, "mask_rate", "mask rate (objective.mask_rate)", {"mlm", "span_corruption"}),
    (SPAN_LENGTH, "span_length", "mean span length (objective.mean_span_length)", {"span_corruption"}),
]
COMPARABLE = [  # (Run.metrics() name, plot name, axis label, the score in a sentence, how to read it)
    (
        "fixed_loss",
        "fixed_loss",
        "fixed-exam loss (eval/fixed/loss)",
        "fixed-exam loss",
        "lower is better; the same windows and masks for every run of a family",
    ),
    (
        "heldout",
        "heldout",
        "held-out text, bits per byte (eval/heldout/bits_per_byte)",
        "held-out text's bits per byte",
        "lower is better; scored by the family's scorer",
    ),
    (
        "pairs",
        "pairs",
        "minimal-pairs accuracy (eval/pairs/accuracy)",
        "minimal-pairs accuracy",
        "higher is better; the same pairs for every run",
    ),
    ("probe", "probe", "probe accuracy (eval/probe/accuracy)", "downstream probe's accuracy", "higher is better"),
]


def reading(metric: str) -> str:
    """What a figure's whiskers and floor are, in sentences (the verdict's rules)."""
    if METRIC_KEYS[metric].endswith("/accuracy"):
        return (
            " Whiskers: each run's 95% interval, the one the verdict reads (its margin over random-init's interval, "
            "drawn around the accuracy). The random-init line is the verdict's floor: a run shows pretraining when "
            "its whole whisker lies above it."
        )
    return (
        " Whiskers: each run's 95% bootstrap interval, the one the verdict reads. A run whose whole whisker lies "
        "above the unigram line is worse than a unigram count model."
    )


def settings_words(runs: list[Run], keys: list[str]) -> str:
    """` Settings: mlm mask_rate=0.1; mlm mask_rate=0.4.` (the verdict's names, a colour each)."""
    return f" Settings: {'; '.join(dict.fromkeys(setting_of(r, keys) for r in runs))}."


def make_plots(runs: list[Run], keys: list[str]) -> list[tuple[str, str, bytes]]:
    """[(name, caption, png bytes)]; a plot not drawn is (name, the line saying why, b"")."""
    plots = []
    for key, name in (("val/loss", "val_loss_vs_tokens"), ("train/loss", "train_loss_vs_tokens")):
        png = plot_loss_vs_tokens(runs, keys, key)
        if png:
            plots.append(
                (
                    name,
                    (
                        f"Each run's own {key.split('/')[0]} loss against tokens seen, a colour per setting "
                        f"({BAND_WORDS}; dashed: a run that did not finish): how it trained on its own exam, not "
                        f"a comparison across settings."
                    ),
                    png,
                )
            )
    compared = "objectives" if len({r.objective for r in runs}) > 1 else "settings"
    for key, name, what in ((PROBE, "probe", "probe accuracy"), (PAIRS, "pairs", "minimal-pairs accuracy")):
        single = []
        for axis, axis_name, label in (
            ("train/tokens_seen", "tokens", "tokens seen (train/tokens_seen)"),
            ("train/flops_seen", "flops", "training FLOPs (train/flops_seen)"),
        ):
            fig, left_out = curves_figure(
                runs,
                key,
                axis,
                f"{what} ({key})",
                label,
                f"{what.capitalize()} against {label.split(' (')[0]}",
                keys,
                True,
            )
            if fig is None:
                single += [label.split(" (")[0]] if left_out else []
                continue
            caption = (
                f"{what.capitalize()} ({key}) against {label}, a colour per setting ({BAND_WORDS}; a point per "
                f"evaluation): the {compared} compared at equal text or equal compute."
                + baseline_words(baselines(runs, key))
                + (f" Left out (evaluated once): {', '.join(left_out)}." if left_out else "")
            )
            plots.append((f"{name}_vs_{axis_name}", caption, _png(fig)))
        if single:
            why = (
                f"{what.capitalize()} against {' and '.join(single)}: not drawn, the evaluation ran once per run "
                f"(one point per setting, no curve); eval.every_n_validations=1 evaluates at every validation."
            )
            plots.append((f"{name}_vs_tokens", why, b""))
    for x_key, x_name, x_label, objectives in KNOBS:
        for metric, name, y_label, noun, how in COMPARABLE:
            fig, scattered = knob_figure(
                runs,
                keys,
                x_key,
                objectives,
                metric,
                f"{noun.capitalize()} against {x_label.split(' (')[0]}",
                x_label,
                y_label,
            )
            if fig is not None:
                chosen = [r for r in runs if r.objective in objectives and r.finished]
                joined = (
                    "each point is a run, no line joins them (the other swept values differ from run to run)"
                    if scattered
                    else "each point is a run, a grey line joins the means over seeds"
                )
                caption = (
                    f"The final {noun} ({how}) against {x_label}: {joined}, a colour per setting."
                    + reading(metric)
                    + baseline_words(baselines(chosen, METRIC_KEYS[metric]))
                    + settings_words(chosen, keys)
                )
                plots.append((f"{name}_vs_{x_name}", caption, _png(fig)))
    for metric, name, y_label, noun, how in COMPARABLE[2:]:  # the fixed exams and scorers differ by family
        fig = setting_figure(runs, keys, metric, f"{noun.capitalize()} by setting", y_label)
        if fig is not None:
            chosen = [r for r in runs if r.finished]
            caption = (
                f"The final {noun} ({how}) per setting: each run a point, side by side, each setting beside its "
                f"architecture's baselines; compare the margins over random-init, not the raw accuracies."
                + reading(metric)
                + baseline_words(baselines(runs, METRIC_KEYS[metric]))
                + settings_words(chosen, keys)
            )
            plots.append((f"{name}_by_setting", caption, _png(fig)))
    return plots
