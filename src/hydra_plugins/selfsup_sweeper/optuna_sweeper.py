"""`hydra/sweeper=selfsup_optuna`: an Optuna (>= 4) study through Optuna's ask-and-tell interface.

    selfsup-train sweeps=tune                                    a new study in <sweep dir>/optuna.db
    selfsup-train sweeps=tune hydra.sweeper.storage=sqlite:///outputs/multirun/<date>/<time>/optuna.db
                                                                 the same study, n_trials more
    optuna-dashboard sqlite:///outputs/multirun/<date>/<time>/optuna.db

Each trial is one job of the sweep: its parameters are asked from the study, the job runs through Hydra's
launcher like any sweep job, and its value (the job's `optimized_metric`) is told back; a job that
failed is a failed trial, one the pruner stopped (`selfsup.tune.TrialPruning`, at validations) a pruned
one. Trials keep their run dir, W&B run id and status as user attributes. A continued study samples new
points: the sampler's seed is offset by the number of trials already in the study. All trials of a study
share one W&B group, across continuations. `params` take Hydra's sweep syntax: `interval(a, b)`,
`tag(log, interval(a, b))`, `choice(x, y)`, `range(a, b)`.
"""

import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger("selfsup")


@dataclass
class SelfSupOptunaSweeperConfig:
    _target_: str = "hydra_plugins.selfsup_sweeper.optuna_sweeper.SelfSupOptunaSweeper"
    direction: str = "maximize"            # of the jobs' optimized_metric
    study_name: str = "selfsup"
    storage: Optional[str] = None          # an RDB URL; default sqlite:///<sweep dir>/optuna.db
    n_trials: int = 20                     # trials this command adds to the study
    n_jobs: int = 1                        # trials launched together (a batch)
    max_failure_rate: float = 0.0          # stop the study once more than this share of its trials failed
    sampler: str = "tpe"                   # tpe | random
    seed: Optional[int] = 0                # the sampler's (offset by the trials already in the study)
    pruner: str = "median"                 # median (stop a trial below the median of earlier ones) | none
    pruner_startup_trials: int = 3         # trials that run to the end before any is pruned
    pruner_warmup_steps: int = 0           # steps of a trial before it can be pruned
    params: Dict[str, str] = field(default_factory=dict)


ConfigStore.instance().store(group="hydra/sweeper", name="selfsup_optuna", node=SelfSupOptunaSweeperConfig,
                             provider="selfsup")


def distributions(params: Dict[str, str]) -> Dict[str, Any]:
    """Optuna distributions of Hydra sweep expressions (`interval`, `tag(log, ...)`, `choice`, `range`)."""
    import optuna.distributions as od
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    out = {}
    for override in parsed:
        key, value = override.get_key_element(), override.value()
        if isinstance(value, IntervalSweep):
            log_scale = "log" in value.tags
            if isinstance(value.start, int) and isinstance(value.end, int):
                out[key] = od.IntDistribution(value.start, value.end, log=log_scale)
            else:
                out[key] = od.FloatDistribution(float(value.start), float(value.end), log=log_scale)
        elif isinstance(value, ChoiceSweep):
            out[key] = od.CategoricalDistribution(list(override.sweep_iterator()))
        elif isinstance(value, RangeSweep):
            out[key] = od.CategoricalDistribution(list(override.sweep_iterator()))
        else:
            raise ValueError(f"hydra.sweeper.params.{key}={params[key]}: use interval(a, b), tag(log, interval(a, b)), "
                             f"choice(a, b, ...) or range(a, b)")
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


class SelfSupOptunaSweeper(Sweeper):
    def __init__(self, direction: str, study_name: str, storage: Optional[str], n_trials: int, n_jobs: int,
                 max_failure_rate: float, sampler: str, seed: Optional[int], pruner: str,
                 pruner_startup_trials: int, pruner_warmup_steps: int, params: Dict[str, str]):
        if sampler not in ("tpe", "random") or pruner not in ("median", "none"):
            raise ValueError(f"hydra.sweeper.sampler={sampler} / pruner={pruner}: use sampler tpe or random, "
                             f"pruner median or none")
        self.direction, self.study_name, self.storage = direction, study_name, storage
        self.n_trials, self.n_jobs, self.max_failure_rate = n_trials, max(1, n_jobs), max_failure_rate
        self.sampler, self.seed, self.pruner = sampler, seed, pruner
        self.pruner_startup_trials, self.pruner_warmup_steps = pruner_startup_trials, pruner_warmup_steps
        self.params = dict(params or {})

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)
        self.sweep_dir = Path(config.hydra.sweep.dir)

    def study(self):
        import optuna
        storage = self.storage or f"sqlite:///{self.sweep_dir / 'optuna.db'}"
        if self.storage is None:
            self.sweep_dir.mkdir(parents=True, exist_ok=True)
        elif storage.startswith("sqlite:///") and not Path(storage.removeprefix("sqlite:///")).is_file():
            print(f"error: hydra.sweeper.storage={storage}: no such study database; to continue a study, pass the "
                  f"optuna.db of its sweep dir; to start one, leave hydra.sweeper.storage unset", file=sys.stderr)
            raise SystemExit(2)
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweeper says what happens, in its own lines
        logging.getLogger("alembic").setLevel(logging.WARNING)  # (SQLite schema set-up, one line per plugin)
        study = optuna.create_study(study_name=self.study_name, storage=storage, direction=self.direction,
                                    load_if_exists=True)
        # a continuation samples new points, not the first ones again: the seed is offset by the trials so far
        seed = None if self.seed is None else self.seed + len(study.trials)
        sampler = (optuna.samplers.TPESampler(seed=seed) if self.sampler == "tpe"
                   else optuna.samplers.RandomSampler(seed=seed))
        pruner = (optuna.pruners.MedianPruner(n_startup_trials=self.pruner_startup_trials,
                                              n_warmup_steps=self.pruner_warmup_steps)
                  if self.pruner == "median" else optuna.pruners.NopPruner())
        return optuna.load_study(study_name=self.study_name, storage=storage, sampler=sampler, pruner=pruner), storage

    def sweep(self, arguments: List[str]) -> None:
        from optuna.trial import TrialState

        from selfsup.sweep import check_jobs
        from selfsup.upstream import optuna_trial_id
        study, storage = self.study()
        space = distributions(self.params)
        group = study_group(self.study_name, storage)
        log.info(f"Optuna study {self.study_name} in {storage}: {len(study.trials)} trials so far, {self.n_trials} more")
        fixed = [a for a in arguments if a.split("=", 1)[0] not in space]
        check_jobs(corners(fixed, space), label="corner of the search space")  # before the first trial
        done, failed, job = 0, 0, 0
        while done < self.n_trials:
            batch = [study.ask(space) for _ in range(min(self.n_jobs, self.n_trials - done))]
            overrides = [tuple(fixed + [f"{k}={v}" for k, v in trial.params.items()]
                               + [f"logger.group={group}",
                                  f"trial={{storage: '{storage}', study: {self.study_name}, "
                                  f"id: {optuna_trial_id(trial)}, pruner: {self.pruner}, "
                                  f"startup: {self.pruner_startup_trials}, warmup: {self.pruner_warmup_steps}}}"])
                         for trial in batch]
            returns = self.launcher.launch(overrides, initial_job_idx=job)
            job += len(batch)
            for trial, ret in zip(batch, returns):
                run_dir = Path(ret.hydra_cfg.hydra.runtime.output_dir) if ret.hydra_cfg else None
                summary = _summary(run_dir)
                trial.set_user_attr("run_dir", str(run_dir) if run_dir else None)
                if run_dir and (run_dir / "wandb-run-id").is_file():
                    trial.set_user_attr("wandb_run_id", (run_dir / "wandb-run-id").read_text().strip())
                status = summary.get("status", "failed")
                trial.set_user_attr("status", status)
                value = ret.return_value if ret.status.name == "COMPLETED" else None
                if status == "pruned":
                    study.tell(trial, state=TrialState.PRUNED)
                elif isinstance(value, (int, float)) and value == value:
                    study.tell(trial, float(value))
                else:
                    failed += 1
                    study.tell(trial, state=TrialState.FAIL)
            done += len(batch)
            if failed / done > self.max_failure_rate:
                log.error(f"{failed} of {done} trials failed, more than hydra.sweeper.max_failure_rate="
                          f"{self.max_failure_rate}: the study stops here")
                break
        complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
        if complete:
            best = study.best_trial
            from selfsup.loggers import shown
            params = ", ".join(f"{k}={shown(str(v))}" for k, v in best.params.items())
            log.info(f"best trial {best.number}: {best.value:.4f} with {params} ({best.user_attrs.get('run_dir')})")
        (self.sweep_dir / "optimization_results.yaml").write_text(OmegaConf.to_yaml({
            "study": self.study_name, "storage": storage, "trials": len(study.trials),
            "best_value": study.best_value if complete else None,
            "best_params": study.best_params if complete else None}))


def _summary(run_dir: Optional[Path]) -> dict:
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError, TypeError):
        return {}
