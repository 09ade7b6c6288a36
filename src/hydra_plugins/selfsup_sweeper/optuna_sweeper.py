"""`hydra/sweeper=selfsup_optuna`: an Optuna (>= 4) study through Optuna's ask-and-tell interface.

    selfsup-train sweeps=tune                                    a new study in <sweep dir>/optuna.db
    selfsup-train sweeps=tune hydra.sweeper.storage=sqlite:///outputs/multirun/<date>/<time>/optuna.db
                                                                 the same study, n_trials more
    optuna-dashboard sqlite:///outputs/multirun/<date>/<time>/optuna.db

Each trial is one job of the sweep: its parameters are asked from the study, the job runs through Hydra's
launcher like any sweep job, and its value (the job's `optimized_metric`) is told back; a job that
failed is a failed trial, one the pruner stopped (`selfsup.tune.TrialPruning`, at validations) a pruned
one. Trials keep their run dir, W&B run id and status as user attributes. The sampling of a trial is
seeded by the sampler's seed plus the trial's number (which the storage gives each trial once): one command
samples the same points again, a continued study new ones, and two continuations at once distinct ones.
While its job runs, the sweeper records a trial's heartbeat every `heartbeat_interval` seconds; a trial
still RUNNING with no heartbeat for `grace_period` seconds (its sweep was killed) is failed when a sweep
on the study starts or asks its next trials, and queued again with its parameters (up to `max_retry`
times): the next trial asked reruns it, one of that command's n_trials. All trials of a study share one W&B
group, across continuations. `params` take Hydra's sweep syntax: `interval(a, b)`,
`tag(log, interval(a, b))`, `choice(x, y)`, `range(a, b)`. Bad settings, a bad search space or an
unreadable study database are refused in one line (exit 2) before any storage is created or changed.
"""

import contextlib
import json
import logging
import sys
import threading
import warnings
from collections import Counter
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
    seed: Optional[int] = 0                # the sampler's (each trial's sampling: seed + the trial's number)
    pruner: str = "median"                 # median (stop a trial below the median of earlier ones) | none
    pruner_startup_trials: int = 3         # trials that run to the end before any is pruned
    pruner_warmup_steps: int = 0           # steps of a trial before it can be pruned
    heartbeat_interval: int = 60           # seconds between the heartbeats of a running trial
    grace_period: int = 120                # a RUNNING trial without a heartbeat this long is failed, and retried
    max_retry: int = 3                     # times a trial failed for want of a heartbeat is retried
    params: Dict[str, str] = field(default_factory=dict)


ConfigStore.instance().store(group="hydra/sweeper", name="selfsup_optuna", node=SelfSupOptunaSweeperConfig,
                             provider="selfsup")


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


def refuse(problem: str) -> None:
    """A bad setting of the sweeper: one line, exit 2 (before any storage is created or changed)."""
    print(f"error: {problem}", file=sys.stderr)
    raise SystemExit(2)


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


class SelfSupOptunaSweeper(Sweeper):
    def __init__(self, direction: str, study_name: str, storage: Optional[str], n_trials: int, n_jobs: int,
                 max_failure_rate: float, sampler: str, seed: Optional[int], pruner: str,
                 pruner_startup_trials: int, pruner_warmup_steps: int, params: Dict[str, str],
                 heartbeat_interval: int = 60, grace_period: int = 120, max_retry: int = 3):
        if sampler not in ("tpe", "random") or pruner not in ("median", "none"):
            refuse(f"hydra.sweeper.sampler={sampler} / pruner={pruner}: use sampler tpe or random, "
                   f"pruner median or none")
        for name, value, sound, says in [
                ("direction", direction, direction in ("maximize", "minimize"), "maximize or minimize"),
                ("n_trials", n_trials, n_trials >= 1, "at least 1 trial"),
                ("n_jobs", n_jobs, n_jobs >= 1, "at least 1 trial at a time"),
                ("max_failure_rate", max_failure_rate, 0 <= max_failure_rate <= 1, "a share between 0 and 1"),
                ("pruner_startup_trials", pruner_startup_trials, pruner_startup_trials >= 0, "0 or more"),
                ("pruner_warmup_steps", pruner_warmup_steps, pruner_warmup_steps >= 0, "0 or more"),
                ("heartbeat_interval", heartbeat_interval, heartbeat_interval >= 1, "at least 1 (seconds)"),
                ("grace_period", grace_period, grace_period > heartbeat_interval,
                 f"seconds, more than heartbeat_interval={heartbeat_interval}, or live trials are failed"),
                ("max_retry", max_retry, max_retry >= 0, "0 or more")]:
            if not sound:
                refuse(f"hydra.sweeper.{name}={value}: use {says}")
        try:
            self.space = distributions(dict(params or {}))  # before any storage: a refused sweep leaves none
        except ValueError as err:
            refuse(str(err))
        self.direction, self.study_name, self.storage = direction, study_name, storage
        self.n_trials, self.n_jobs, self.max_failure_rate = n_trials, n_jobs, max_failure_rate
        self.sampler, self.seed, self.pruner = sampler, seed, pruner
        self.pruner_startup_trials, self.pruner_warmup_steps = pruner_startup_trials, pruner_warmup_steps
        self.heartbeat_interval, self.grace_period, self.max_retry = heartbeat_interval, grace_period, max_retry
        self.params = dict(params or {})

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)
        self.sweep_dir = Path(config.hydra.sweep.dir)

    def study(self):
        """The study (created in <sweep dir>/optuna.db, or loaded from hydra.sweeper.storage), its stale
        trials failed and queued again, and its storage URL."""
        import optuna
        import sqlalchemy.exc
        url = self.storage or f"sqlite:///{self.sweep_dir / 'optuna.db'}"
        if self.storage is None:
            self.sweep_dir.mkdir(parents=True, exist_ok=True)
        elif url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
            refuse(f"hydra.sweeper.storage={url}: no such study database; to continue a study, pass the "
                   f"optuna.db of its sweep dir; to start one, leave hydra.sweeper.storage unset")
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweeper says what happens, in its own lines
        logging.getLogger("alembic").setLevel(logging.WARNING)  # (SQLite schema set-up, one line per plugin)
        retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)  # Optuna >= 4.9
        with quiet():
            retry = ({"heartbeat_stale_trial_callback": retry(max_retry=self.max_retry)} if retry else
                     {"failed_trial_callback": optuna.storages.RetryFailedTrialCallback(max_retry=self.max_retry)})
        sampler = per_trial_seeded(optuna.samplers.TPESampler if self.sampler == "tpe"
                                   else optuna.samplers.RandomSampler, self.seed)
        pruner = (optuna.pruners.MedianPruner(n_startup_trials=self.pruner_startup_trials,
                                              n_warmup_steps=self.pruner_warmup_steps)
                  if self.pruner == "median" else optuna.pruners.NopPruner())
        try:
            with quiet():
                self.rdb = optuna.storages.RDBStorage(url, heartbeat_interval=self.heartbeat_interval,
                                                      grace_period=self.grace_period, **retry)
                study = optuna.create_study(study_name=self.study_name, storage=self.rdb, sampler=sampler,
                                            pruner=pruner, direction=self.direction, load_if_exists=True)
        except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as err:
            reason = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
            refuse(f"hydra.sweeper.storage={url}: cannot read the study database ({reason}): pass the optuna.db "
                   f"of a study's sweep dir, or leave hydra.sweeper.storage unset for a new study")
        self.fail_stale(study)
        return study, url

    def fail_stale(self, study) -> None:
        """Fail the RUNNING trials of the study whose heartbeat stopped more than grace_period ago (their
        sweep was killed); Optuna's retry callback queues each again with its parameters."""
        import optuna
        from optuna.trial import TrialState
        running = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
        with quiet():
            optuna.storages.fail_stale_trials(study)
        for trial in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
            if trial.number in running and "status" not in trial.user_attrs:  # (a job's end sets a status)
                log.warning(f"trial {trial.number} had no heartbeat for {self.grace_period} s (its sweep was killed): "
                            f"failed, and queued again with its parameters (up to hydra.sweeper.max_retry="
                            f"{self.max_retry} times)")

    def ask(self, study, n: int) -> list:
        """n trials: the queued ones first (a stale trial's retry), then new points."""
        self.fail_stale(study)
        with quiet():
            return [study.ask(self.space) for _ in range(n)]

    @contextlib.contextmanager
    def heartbeats(self, trials: list):
        """Record the trials' heartbeats every heartbeat_interval seconds while the block runs (Optuna does
        it only inside Study.optimize)."""
        from selfsup.upstream import optuna_trial_id
        ids = [optuna_trial_id(trial) for trial in trials]
        stop = threading.Event()

        def beat():
            while not stop.wait(self.heartbeat_interval):
                for trial_id in ids:
                    try:
                        self.rdb.record_heartbeat(trial_id)
                    except Exception as err:  # noqa: BLE001 - a locked database: the next beat tries again
                        log.warning(f"Optuna heartbeat not recorded ({type(err).__name__}: {err})")
        for trial_id in ids:  # before the jobs start
            self.rdb.record_heartbeat(trial_id)
        thread = threading.Thread(target=beat, name="optuna-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def results(self, study, storage: str) -> None:
        """optimization_results.yaml in the sweep dir: the study and its storage (for selfsup-report; written
        first when the sweep starts, so that a killed sweep names its study too), its best trial so far."""
        from optuna.trial import TrialState
        complete = any(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False))
        (self.sweep_dir / "optimization_results.yaml").write_text(OmegaConf.to_yaml({
            "study": self.study_name, "storage": storage, "trials": len(study.trials),
            "best_value": study.best_value if complete else None,
            "best_params": study.best_params if complete else None}))

    def sweep(self, arguments: List[str]) -> None:
        from optuna.trial import TrialState

        from selfsup.sweep import check_jobs
        from selfsup.upstream import optuna_trial_id
        space = self.space
        fixed = [a for a in arguments if a.split("=", 1)[0] not in space]
        check_jobs(corners(fixed, space), label="corner of the search space")  # before the first trial, and the storage
        study, storage = self.study()
        group = study_group(self.study_name, storage)
        states = Counter(t.state.name.lower() for t in study.trials)
        so_far = f" ({', '.join(f'{n} {state}' for state, n in states.items())})" if states else ""
        log.info(f"Optuna study {self.study_name} in {storage}: {len(study.trials)} trials so far{so_far}, "
                 f"{self.n_trials} more")
        self.results(study, storage)
        done, failed, job = 0, 0, 0
        while done < self.n_trials:
            batch = self.ask(study, min(self.n_jobs, self.n_trials - done))
            overrides = [tuple(fixed + [f"{k}={v}" for k, v in trial.params.items()]
                               + [f"logger.group={group}",
                                  f"trial={{storage: '{storage}', study: {self.study_name}, "
                                  f"id: {optuna_trial_id(trial)}, pruner: {self.pruner}, "
                                  f"startup: {self.pruner_startup_trials}, warmup: {self.pruner_warmup_steps}}}"])
                         for trial in batch]
            with self.heartbeats(batch):
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
        self.results(study, storage)


def _summary(run_dir: Optional[Path]) -> dict:
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError, TypeError):
        return {}
    return summary if isinstance(summary, dict) else {}
