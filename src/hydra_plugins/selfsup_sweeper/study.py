"""The study's bookkeeping: its search space and corners, W&B group, per-trial sampling seed and each trial's record."""

import contextlib
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.override_parser.overrides_parser import OverridesParser


def distributions(params: Dict[str, str]) -> Dict[str, Any]:
    """Optuna distributions of Hydra sweep expressions (`interval`, `tag(log, ...)`, `choice`, `range`);
    ValueError naming the parameter for anything else, or an empty or upside-down range."""
    import optuna.distributions as od
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
    from hydra.errors import HydraException

    out = {}
    for key, expression in params.items():
        where = f"hydra.sweeper.params.{key}={expression}"
        try:
            override = OverridesParser.create().parse_override(f"{key}={expression}")
        except HydraException as err:
            raise ValueError(f"{where}: {str(err).splitlines()[0]}") from None
        value = override.value()
        try:
            if isinstance(value, IntervalSweep):
                log_scale = "log" in value.tags
                if value.start > value.end:
                    raise ValueError(f"low {value.start} is above high {value.end}: use interval(low, high)")
                if log_scale and value.start <= 0:
                    raise ValueError(f"a log interval needs low > 0 (it has {value.start})")
                if isinstance(value.start, int) and isinstance(value.end, int):
                    out[key] = od.IntDistribution(value.start, value.end, log=log_scale)
                else:
                    out[key] = od.FloatDistribution(float(value.start), float(value.end), log=log_scale)
            elif isinstance(value, (ChoiceSweep, RangeSweep)):
                out[key] = od.CategoricalDistribution(list(override.sweep_iterator()))
            else:
                raise ValueError("use interval(a, b), tag(log, interval(a, b)), choice(a, b, ...) or range(a, b)")
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
    return out


def corners(fixed: List[str], space: Dict[str, Any]) -> List[List[str]]:
    """Jobs at the edges of the search space: each parameter at each end (each choice), the others at their
    low end: what the sweep checks before its first trial."""

    def ends(distribution) -> list:
        return list(distribution.choices) if hasattr(distribution, "choices") else [distribution.low, distribution.high]

    low = {k: ends(d)[0] for k, d in space.items()}
    jobs = []
    for key, distribution in space.items():
        for value in ends(distribution):
            jobs.append(fixed + [f"{k}={value if k == key else v}" for k, v in low.items()])
    return jobs or [fixed]


def study_group(study_name: str, storage: str) -> str:
    """The W&B group of every trial of a study: its name and, for SQLite, the sweep dir that holds it."""
    if storage.startswith("sqlite:///"):
        folder = Path(storage.removeprefix("sqlite:///")).parent
        return f"{study_name}-{folder.parent.name}-{folder.name}"
    return study_name


@contextlib.contextmanager
def quiet():
    """Without Optuna's warnings that heartbeats are experimental and meant for Study.optimize (the
    sweeper records them itself, around its jobs)."""
    from optuna.exceptions import ExperimentalWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        yield


def per_trial_seeded(make, seed: Optional[int]):
    """A sampler whose draws for a trial come from make(seed + the trial's number): a fresh sampler at each
    trial's start (Optuna's before_trial, once the storage has numbered the trial)."""
    from optuna.samplers import BaseSampler

    class PerTrialSeeded(BaseSampler):
        def __init__(self):
            self.inner = make(seed=seed)

        def before_trial(self, study, trial):
            if seed is not None:
                self.inner = make(seed=seed + trial.number)
            self.inner.before_trial(study, trial)

        def infer_relative_search_space(self, study, trial):
            return self.inner.infer_relative_search_space(study, trial)

        def sample_relative(self, study, trial, search_space):
            return self.inner.sample_relative(study, trial, search_space)

        def sample_independent(self, study, trial, param_name, param_distribution):
            return self.inner.sample_independent(study, trial, param_name, param_distribution)

        def after_trial(self, study, trial, state, values):
            self.inner.after_trial(study, trial, state, values)

        def reseed_rng(self):
            self.inner.reseed_rng()

    return PerTrialSeeded()


def seed_record(metric: str, values: List[float], summaries: List[dict]) -> Dict[str, Any]:
    """A complete trial's user attributes from its runs (seed 0 first): `seeds`, `values` (each seed's), and
    `value_se`: with 2 seeds or more sd over seeds / sqrt(n); with 1, the metric's own `<metric>_se` from its
    summary.json (the standard error over the test examples), else None. For an accuracy with a random-init
    baseline (eval/<task>/accuracy): `random_init` (mean over seeds of eval/<task>/random_init_accuracy),
    `random_init_sd` (root mean square of the seeds' ..._sd), and the margin over random-init: with 1 seed
    `margin`, `margin_low`, `margin_high` (the run's paired-bootstrap 95% interval), with more `margin` (mean
    over seeds) and `margin_se` (sd over seeds / sqrt(n))."""
    import math
    import statistics

    n = len(values)
    evals = [s.get("eval") if isinstance(s.get("eval"), dict) else {} for s in summaries]

    def each(key: str) -> Optional[List[float]]:
        found = [e.get(key) for e in evals]
        if len(found) == n and all(isinstance(v, (int, float)) and math.isfinite(v) for v in found):
            return [float(v) for v in found]
        return None

    out: Dict[str, Any] = {"seeds": n, "values": [float(v) for v in values]}
    own = each(f"{metric}_se")
    out["value_se"] = statistics.stdev(values) / math.sqrt(n) if n >= 2 else (own[0] if own else None)
    prefix, _, name = metric.rpartition("/")
    if prefix.startswith("eval/") and name == "accuracy":
        random_init, sds = each(f"{prefix}/random_init_accuracy"), each(f"{prefix}/random_init_accuracy_sd")
        if random_init:
            out["random_init"] = statistics.fmean(random_init)
            out["random_init_sd"] = math.sqrt(statistics.fmean([s * s for s in sds])) if sds else None
        margins = each(f"{prefix}/margin")
        if margins and n == 1:
            low, high = each(f"{prefix}/margin_low"), each(f"{prefix}/margin_high")
            out.update(margin=margins[0], margin_low=low[0] if low else None, margin_high=high[0] if high else None)
        elif margins:
            out.update(margin=statistics.fmean(margins), margin_se=statistics.stdev(margins) / math.sqrt(n))
    return out
