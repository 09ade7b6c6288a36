"""Optuna studies of the sweep dirs: finding and reading them, what they say, the parameters' importances."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from selfsup.common.names import shown

MIN_IMPORTANCE_TRIALS = 10  # importances from fewer complete trials are noise, shown as if they were not


def _study_places(arg: str) -> list[Path]:
    """The folders of `arg` that ran a study: itself, else its subfolders (a parent of sweep dirs)."""
    path = Path(arg)

    def ran(p: Path) -> bool:
        return (p / "optimization_results.yaml").is_file() or (p / "optuna.db").is_file()

    if ran(path):
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and ran(p)) if path.is_dir() else []


def _storage_key(storage: str) -> str:
    """One key per storage: a SQLite URL by its file's resolved path (the same optuna.db under two names)."""
    if storage.startswith("sqlite:///"):
        return str(Path(storage.removeprefix("sqlite:///")).resolve())
    return storage


def load_studies(paths: list[str]) -> tuple[list, list[str]]:
    """The Optuna studies of the sweep dirs that ran one (hydra/sweeper=selfsup_optuna writes
    optimization_results.yaml there when it starts, naming the study and its storage; a sweep dir with only
    its optuna.db, killed before it wrote that: every study in it), or of the sweep dirs inside a folder given;
    each study once (by its storage file and name, however many folders name it), and the problems met
    reading them."""
    found, seen, problems = [], set(), []
    for place in [p for arg in paths for p in _study_places(arg)]:
        results, db = place / "optimization_results.yaml", place / "optuna.db"
        try:
            import optuna
        except ImportError:
            problems.append(f"{place} ran an Optuna study; install selfsup[sweep] to show it in the report")
            continue
        try:
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            if results.is_file():
                meta = OmegaConf.to_container(OmegaConf.load(results))
                named = [(meta["storage"], meta["study"])]
            else:
                storage = f"sqlite:///{db.resolve()}"
                named = [(storage, name) for name in optuna.get_all_study_names(storage)]
            named = [(storage, name) for storage, name in named if (_storage_key(storage), name) not in seen]
            studies = [optuna.load_study(study_name=name, storage=storage) for storage, name in named]
            for study in studies:  # every trial read: a database damaged in the middle fails here, not in a plot
                study.get_trials(deepcopy=False)
        except Exception as err:  # noqa: BLE001 - a moved storage, a study deleted: the rest of the report stands
            cause = getattr(err.__cause__, "orig", None) or err.__cause__ or err  # (Optuna wraps SQLite's reason)
            problems.append(
                f"cannot read the Optuna study of {place}: {str(cause).splitlines()[0] if str(cause) else cause}"
            )
            continue
        for (storage, name), study in zip(named, studies):
            seen.add((_storage_key(storage), name))
            found.append(study)
    return found, problems


def study_importances(study) -> tuple[dict | None, str]:
    """The parameters' importances (optuna.importance.get_param_importances with its default evaluator:
    PED-ANOVA in Optuna 5, fANOVA would need scikit-learn) and the line that says them; None, and a line
    saying why not, with fewer than MIN_IMPORTANCE_TRIALS complete trials. The one place they are computed
    (the report's plot draws this dict)."""
    from optuna.trial import TrialState

    n = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    if n < MIN_IMPORTANCE_TRIALS:
        return None, (f"Parameter importances: need {MIN_IMPORTANCE_TRIALS} completed trials, the study has {n}.")
    import optuna

    importances = optuna.importance.get_param_importances(study)
    listed = ", ".join(f"{k} {v:.2f}" for k, v in importances.items())
    return importances, f"Parameter importances (Optuna's default evaluator, over {n} complete trials): {listed}."


def _se_text(trial) -> str:
    se = trial.user_attrs.get("value_se")
    if se is None:
        return " (SE unknown)"
    seeds = trial.user_attrs.get("seeds", 1)
    return f" ± {se:.4f} (SE {'over ' + str(seeds) + ' seeds' if seeds > 1 else 'over the test examples'})"


def study_best_lines(study) -> list[str]:
    """The best complete trial with its uncertainty: its value ± SE (user attribute value_se), its margin over
    random-init (its 95% interval with one seed, ± SE over seeds), and its margin over the runner-up with
    the SE of the difference, sqrt(se1² + se2²): "not distinguishable" when |difference| < 2 SE. Nothing
    without a complete trial."""
    import math

    from optuna.trial import TrialState

    complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if not complete:
        return []
    maximize = study.direction.name == "MAXIMIZE"
    ranked = sorted(complete, key=lambda t: t.value, reverse=maximize)
    best = ranked[0]
    attrs = best.user_attrs
    params = ", ".join(f"{k}={shown(v)}" for k, v in best.params.items())
    lines = [
        (
            f"Best: trial {best.number}, value {best.value:.4f}{_se_text(best)}, {params} "
            f"(run dir {attrs.get('run_dir', '?')})."
        )
    ]
    if attrs.get("random_init") is not None:
        sd = attrs.get("random_init_sd")
        base = f"random-init {attrs['random_init']:.4f}" + (f" ± {sd:.4f} sd" if sd is not None else "")
        if attrs.get("margin") is None:
            lines.append(f"Best over {base}: no margin measured.")
        elif attrs.get("margin_low") is not None and attrs.get("margin_high") is not None:
            lines.append(
                f"Best over {base}: margin {attrs['margin']:+.4f} (95% interval {attrs['margin_low']:+.4f} "
                f"to {attrs['margin_high']:+.4f})."
            )
        elif attrs.get("margin_se") is not None:
            lines.append(
                f"Best over {base}: margin {attrs['margin']:+.4f} ± {attrs['margin_se']:.4f} "
                f"(SE over {attrs.get('seeds')} seeds)."
            )
        else:
            lines.append(f"Best over {base}: margin {attrs['margin']:+.4f} (interval unknown).")
    if len(ranked) < 2:
        lines.append("No runner-up: 1 complete trial.")
        return lines
    other = ranked[1]
    difference = abs(best.value - other.value)
    se1, se2 = attrs.get("value_se"), other.user_attrs.get("value_se")
    head = f"Best over the runner-up, trial {other.number} ({other.value:.4f}{_se_text(other)}): {difference:+.4f}"
    if se1 is None or se2 is None:
        lines.append(
            f"{head}; SE unknown: cannot say whether trial {best.number} is distinguishable from trial {other.number}."
        )
    else:
        se = math.sqrt(se1**2 + se2**2)
        verdict = (
            f"not distinguishable from trial {other.number} (|difference| < 2 SE)"
            if difference < 2 * se
            else f"distinguishable from trial {other.number} (|difference| >= 2 SE)"
        )
        lines.append(f"{head} ± {se:.4f} (SE of the difference): {verdict}.")
    return lines


def study_lines(study) -> list[str]:
    """What the study says: its trials by state (RUNNING ones: still running, or their sweep was killed),
    its best trial with its uncertainty (study_best_lines), and its parameters' importances or why not."""
    from optuna.trial import TrialState

    counts = {state: [t.number for t in study.trials if t.state == state] for state in TrialState}
    lines = [
        f"Optuna study {study.study_name} ({study.direction.name.lower()} the jobs' optimized_metric): "
        f"{len(study.trials)} trials, {len(counts[TrialState.COMPLETE])} complete, "
        f"{len(counts[TrialState.PRUNED])} pruned, {len(counts[TrialState.FAIL])} failed, "
        f"{len(counts[TrialState.RUNNING])} running"
        + (f", {len(counts[TrialState.WAITING])} waiting (queued to rerun)." if counts[TrialState.WAITING] else ".")
    ]
    if counts[TrialState.RUNNING]:
        numbers = counts[TrialState.RUNNING]
        lines.append(
            f"Running: trial{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))}: still "
            f"running, or {'their' if len(numbers) > 1 else 'its'} sweep was killed (a continuation of the "
            f"study fails and reruns a trial once it has had no heartbeat for hydra.sweeper.grace_period)."
        )
    lines += study_best_lines(study)
    if counts[TrialState.COMPLETE]:
        lines.append(study_importances(study)[1])
    return lines
