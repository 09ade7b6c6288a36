"""`hydra/sweeper=selfsup_optuna`: an Optuna (>= 4) study through Optuna's ask-and-tell interface.

    selfsup-train sweeps=tune                                    a new study in <sweep dir>/optuna.db
    selfsup-train sweeps=tune hydra.sweeper.storage=sqlite:///outputs/multirun/<date>/<time>/optuna.db
                                                                 the same study, n_trials more
    optuna-dashboard sqlite:///outputs/multirun/<date>/<time>/optuna.db

Each trial is `hydra.sweeper.seeds` jobs (default 1): its parameters are asked from the study, each job runs
through Hydra's launcher like any sweep job (with seeds > 1: `seed=0..n-1`), and its value, the mean of the
jobs' `optimized_metric`, is told back; a trial whose job failed is a failed trial, one the pruner stopped a
pruned one. With seeds > 1 only seed 0's job reports at validations and can be pruned (selfsup.training.tune: only when
worse than the pruner's reference by more than the metric's standard error); its other seeds run once it
finished. One number names a trial everywhere: Optuna's trial.number is its Hydra job number, its job dir
(`<sweep dir>/<number>`, with seeds > 1 `<number>-seed<k>`), the `trial.number` of its config and the logs.
A continued SQLite study writes its jobs into the study's own sweep dir (the folder of its optuna.db; the
command's own, empty, is taken back): one folder, one study; optimization_results.yaml there lists each
command's overrides and trial numbers.

A trial's user attributes: `run_dir` (seed 0's), `run_dirs` (each seed's), `wandb_run_id` (seed 0's),
`status`; a complete trial's also `seeds`, `values` (each seed's), `value_se` (the standard error of its
value: sd over seeds / sqrt(n), with one seed the metric's own `<metric>_se` from summary.json, else None),
and for an eval/<task>/accuracy `random_init`, `random_init_sd` (its random-init baseline) and `margin` over
it: with one seed `margin_low`, `margin_high` (its 95% interval), with more `margin_se` (see seed_record).

The sampling of a trial is seeded by the sampler's seed plus the trial's number (which the storage gives each
trial once): one command samples the same points again, a continued study new ones, and two continuations at
once distinct ones. While its jobs run, the sweeper records a trial's heartbeat every `heartbeat_interval`
seconds; a trial still RUNNING with no heartbeat for `grace_period` seconds (its sweep was killed) is failed
when a sweep on the study starts or asks its next trials, and queued again with its parameters (up to
`max_retry` times): the next trial asked reruns it, one of that command's n_trials. All trials of a study share
one W&B group, across continuations. The closing lines give the best trial's value ± SE and its margins
(selfsup.report.studies.study_best_lines). `params` take Hydra's sweep syntax: `interval(a, b)`,
`tag(log, interval(a, b))`, `choice(x, y)`, `range(a, b)`. Bad settings, a bad search space or an
unreadable study database are refused in one line (exit 2) before any storage is created or changed.
"""

import contextlib
import logging
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.selfsup_sweeper.study import (
    corners,
    distributions,
    per_trial_seeded,
    quiet,
    seed_record,
    study_group,
)
from selfsup.common.names import WANDB_RUN_ID, RunSummary, override_key

log = logging.getLogger("selfsup")


@dataclass
class SelfSupOptunaSweeperConfig:
    _target_: str = "hydra_plugins.selfsup_sweeper.optuna_sweeper.SelfSupOptunaSweeper"
    direction: str = "maximize"  # of the jobs' optimized_metric
    study_name: str = "selfsup"
    storage: Optional[str] = None  # an RDB URL; default sqlite:///<sweep dir>/optuna.db
    n_trials: int = 20  # trials this command adds to the study
    n_jobs: int = 1  # trials launched together (a batch)
    max_failure_rate: float = 0.0  # stop the study once more than this share of its trials failed
    sampler: str = "tpe"  # tpe | random
    seed: Optional[int] = 0  # the sampler's (each trial's sampling: seed + the trial's number)
    seeds: int = 1  # runs per trial (seed=0..seeds-1): its value is their mean
    pruner: str = "median"  # median | hyperband | none (selfsup.training.tune: only beyond the metric's SE)
    pruner_startup_trials: int = 3  # median: trials that run to the end before any is pruned
    pruner_warmup_steps: int = 0  # median: steps of a trial before it can be pruned
    pruner_reduction_factor: int = 3  # hyperband: 1 in this many trials goes on at each rung
    heartbeat_interval: int = 60  # seconds between the heartbeats of a running trial
    grace_period: int = 120  # a RUNNING trial without a heartbeat this long is failed, and retried
    max_retry: int = 3  # times a trial failed for want of a heartbeat is retried
    params: Dict[str, str] = field(default_factory=dict)


ConfigStore.instance().store(
    group="hydra/sweeper", name="selfsup_optuna", node=SelfSupOptunaSweeperConfig, provider="selfsup"
)


def refuse(problem: str) -> None:
    """A bad setting of the sweeper: one line, exit 2 (before any storage is created or changed; the sweep dir's lock
    taken back)."""
    from selfsup.run.sweep import take_back_claim

    print(f"error: {problem}", file=sys.stderr)
    take_back_claim()
    raise SystemExit(2)


class SelfSupOptunaSweeper(Sweeper):
    def __init__(
        self,
        direction: str,
        study_name: str,
        storage: Optional[str],
        n_trials: int,
        n_jobs: int,
        max_failure_rate: float,
        sampler: str,
        seed: Optional[int],
        pruner: str,
        pruner_startup_trials: int,
        pruner_warmup_steps: int,
        params: Dict[str, str],
        heartbeat_interval: int = 60,
        grace_period: int = 120,
        max_retry: int = 3,
        seeds: int = 1,
        pruner_reduction_factor: int = 3,
    ):
        from selfsup.training.tune import PRUNERS

        for name, value, sound, says in [
            ("sampler", sampler, sampler in ("tpe", "random"), "tpe or random"),
            ("pruner", pruner, pruner in PRUNERS, f"{', '.join(PRUNERS[:-1])} or {PRUNERS[-1]}"),
            ("direction", direction, direction in ("maximize", "minimize"), "maximize or minimize"),
            ("n_trials", n_trials, n_trials >= 1, "at least 1 trial"),
            ("n_jobs", n_jobs, n_jobs >= 1, "at least 1 trial at a time"),
            ("seeds", seeds, isinstance(seeds, int) and seeds >= 1, "at least 1 run (seed) per trial"),
            ("max_failure_rate", max_failure_rate, 0 <= max_failure_rate <= 1, "a share between 0 and 1"),
            ("pruner_startup_trials", pruner_startup_trials, pruner_startup_trials >= 0, "0 or more"),
            ("pruner_warmup_steps", pruner_warmup_steps, pruner_warmup_steps >= 0, "0 or more"),
            ("pruner_reduction_factor", pruner_reduction_factor, pruner_reduction_factor >= 2, "2 or more"),
            ("heartbeat_interval", heartbeat_interval, heartbeat_interval >= 1, "at least 1 (seconds)"),
            (
                "grace_period",
                grace_period,
                grace_period > heartbeat_interval,
                f"seconds, more than heartbeat_interval={heartbeat_interval}, or live trials are failed",
            ),
            ("max_retry", max_retry, max_retry >= 0, "0 or more"),
        ]:
            if not sound:
                refuse(f"hydra.sweeper.{name}={value}: use {says}")
        try:
            self.space = distributions(dict(params or {}))  # before any storage: a refused sweep leaves none
        except ValueError as err:
            refuse(str(err))
        self.direction, self.study_name, self.storage = direction, study_name, storage
        self.n_trials, self.n_jobs, self.max_failure_rate, self.seeds = n_trials, n_jobs, max_failure_rate, seeds
        self.sampler, self.seed, self.pruner = sampler, seed, pruner
        self.pruner_startup_trials, self.pruner_warmup_steps = pruner_startup_trials, pruner_warmup_steps
        self.pruner_reduction_factor = pruner_reduction_factor
        self.heartbeat_interval, self.grace_period, self.max_retry = heartbeat_interval, grace_period, max_retry
        self.params = dict(params or {})
        self.config, self.metric = None, "optimized_metric"

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )
        self.sweep_dir = Path(config.hydra.sweep.dir)
        self.metric = str(config.get("optimized_metric") or "optimized_metric")

    def pruner_settings(self) -> dict:
        """What selfsup.training.tune.make_pruner builds the study's pruner from, in this process and in each job (the
        `trial=` override). Hyperband's resource is the step of a validation: from the first validation
        (trainer.val_check_interval) to the last (trainer.max_steps), else 1 and Optuna's `auto`."""
        trainer = (self.config.get("trainer") if self.config is not None else None) or {}
        first, last = trainer.get("val_check_interval"), trainer.get("max_steps")
        return {
            "pruner": self.pruner,
            "startup": self.pruner_startup_trials,
            "warmup": self.pruner_warmup_steps,
            "min_resource": first if isinstance(first, int) and first >= 1 else 1,
            "max_resource": last if isinstance(last, int) and last >= 1 else None,
            "reduction_factor": self.pruner_reduction_factor,
        }

    def study(self):
        """The study (created in <sweep dir>/optuna.db, or loaded from hydra.sweeper.storage), its stale
        trials failed and queued again, and its storage URL."""
        import optuna
        import sqlalchemy.exc

        from selfsup.training.tune import make_pruner

        url = self.storage or f"sqlite:///{self.sweep_dir / 'optuna.db'}"
        if self.storage is None:
            self.sweep_dir.mkdir(parents=True, exist_ok=True)
        elif url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).is_file():
            refuse(
                f"hydra.sweeper.storage={url}: no such study database; to continue a study, pass the "
                f"optuna.db of its sweep dir; to start one, leave hydra.sweeper.storage unset"
            )
        elif url.startswith("sqlite:///") and Path(url.removeprefix("sqlite:///")).stat().st_size == 0:
            refuse(
                f"hydra.sweeper.storage={url}: an empty file, not a study database; to continue a study, pass "
                f"the optuna.db of its sweep dir; to start one, leave hydra.sweeper.storage unset"
            )
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweeper says what happens, in its own lines
        logging.getLogger("alembic").setLevel(logging.WARNING)  # (SQLite schema set-up, one line per plugin)
        retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)  # Optuna >= 4.9
        with quiet():
            retry = (
                {"heartbeat_stale_trial_callback": retry(max_retry=self.max_retry)}
                if retry
                else {"failed_trial_callback": optuna.storages.RetryFailedTrialCallback(max_retry=self.max_retry)}
            )
        sampler = per_trial_seeded(
            optuna.samplers.TPESampler if self.sampler == "tpe" else optuna.samplers.RandomSampler, self.seed
        )
        try:
            with quiet():
                self.rdb = optuna.storages.RDBStorage(
                    url, heartbeat_interval=self.heartbeat_interval, grace_period=self.grace_period, **retry
                )
                study = optuna.create_study(
                    study_name=self.study_name,
                    storage=self.rdb,
                    sampler=sampler,
                    pruner=make_pruner(self.pruner_settings()),
                    direction=self.direction,
                    load_if_exists=True,
                )
                study.get_trials(deepcopy=False)  # every trial read: a database damaged in the middle fails here
                self.fail_stale(study)
        except (sqlalchemy.exc.SQLAlchemyError, optuna.exceptions.StorageInternalError) as err:
            cause = err.__cause__ if isinstance(err, optuna.exceptions.StorageInternalError) and err.__cause__ else err
            reason = str(getattr(cause, "orig", None) or cause).strip().splitlines()[0]
            refuse(
                f"hydra.sweeper.storage={url}: cannot read the study database ({reason}): pass the optuna.db "
                f"of a study's sweep dir, or leave hydra.sweeper.storage unset for a new study"
            )
        return study, url

    def into_study_dir(self, storage: str) -> Optional[Path]:
        """A continued SQLite study: its trials' jobs go into the folder of its optuna.db (one folder, one
        study): hydra.sweep.dir of the jobs and of the end-of-sweep table becomes that folder, and the
        command's own sweep dir, still empty, is taken back. That folder, or None (no change)."""
        if self.storage is None or not storage.startswith("sqlite:///"):
            return None
        study_dir = Path(storage.removeprefix("sqlite:///")).resolve().parent
        own = self.sweep_dir
        if own.resolve() == study_dir:
            return None
        if self.config is not None:
            from omegaconf import open_dict, read_write

            with read_write(self.config), open_dict(self.config):
                self.config.hydra.sweep.dir = str(study_dir)
        from selfsup.run.run_dir import LOCK

        with contextlib.suppress(OSError):
            if own.is_dir() and {p.name for p in own.iterdir()} <= {LOCK}:
                (own / LOCK).unlink(missing_ok=True)
                own.rmdir()
        self.sweep_dir = study_dir
        log.info(f"continuing the study of {study_dir}: its trials' jobs are written there, beside the earlier ones")
        return study_dir

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
                log.warning(
                    f"trial {trial.number} had no heartbeat for {self.grace_period} s (its sweep was killed): "
                    f"failed, and queued again with its parameters (up to hydra.sweeper.max_retry="
                    f"{self.max_retry} times)"
                )

    def ask(self, study, n: int) -> list:
        """n trials: the queued ones first (a stale trial's retry), then new points."""
        self.fail_stale(study)
        with quiet():
            return [study.ask(self.space) for _ in range(n)]

    @contextlib.contextmanager
    def heartbeats(self, trials: list):
        """Record the trials' heartbeats every heartbeat_interval seconds while the block runs (Optuna does
        it only inside Study.optimize)."""
        from selfsup.common.upstream import optuna_trial_id

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

    def results(self, study, storage: str, command: Optional[dict] = None) -> None:
        """optimization_results.yaml in the sweep dir: the study and its storage (for selfsup-report; written
        first when the sweep starts, so that a killed sweep names its study too), its best trial so far, and
        each command that added trials to it (its overrides and trial numbers; a continuation appends)."""
        from optuna.trial import TrialState

        path = self.sweep_dir / "optimization_results.yaml"
        commands = []
        with contextlib.suppress(Exception):
            commands = list(OmegaConf.to_container(OmegaConf.load(path)).get("commands") or [])
        if command is not None:
            commands = [c for c in commands if c.get("id") != command["id"]] + [command]
        complete = any(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False))
        path.write_text(
            OmegaConf.to_yaml(
                {
                    "study": self.study_name,
                    "storage": storage,
                    "trials": len(study.trials),
                    "best_value": study.best_value if complete else None,
                    "best_params": study.best_params if complete else None,
                    "commands": commands,
                }
            )
        )

    def overrides(
        self, fixed: List[str], trial, seed: int, group: str, storage: str, study_dir: Optional[Path]
    ) -> tuple:
        """One job of a trial: its parameters, its seed (seeds > 1), the `trial=` override of the job that
        reports (seed 0), and its folder: <number>, or <number>-seed<k> with seeds > 1."""
        import json as _json

        pruning = ", ".join(f"{k}: {'null' if v is None else v}" for k, v in self.pruner_settings().items())
        name = str(trial.number) if self.seeds == 1 else f"{trial.number}-seed{seed}"
        return tuple(
            fixed
            + [f"{k}={v}" for k, v in trial.params.items()]
            + [f"logger.group={group}"]
            + ([f"seed={seed}"] if self.seeds > 1 else [])
            + (
                [f"trial={{storage: '{storage}', study: {self.study_name}, number: {trial.number}, {pruning}}}"]
                if seed == 0
                else []
            )
            + [f"hydra.sweep.subdir={name}"]
            + ([f"hydra.sweep.dir={_json.dumps(str(study_dir))}"] if study_dir else [])
        )

    def launch(self, jobs: list, **how) -> dict:
        """Run jobs [(trial, seed)] through the launcher, Hydra's job number = the trial's number (trials of
        consecutive numbers in one launch); {(number, seed): JobReturn}."""
        out, run = {}, []
        for i, (trial, seed) in enumerate(jobs):
            run.append((trial, seed))
            if i + 1 == len(jobs) or jobs[i + 1][0].number != trial.number + 1:
                returns = self.launcher.launch(
                    [self.overrides(trial=t, seed=k, **how) for t, k in run], initial_job_idx=run[0][0].number
                )
                out.update({(t.number, k): ret for (t, k), ret in zip(run, returns)})
                run = []
        return out

    def tell(self, study, trial, returns: list) -> bool:
        """Tell the study a trial's outcome from its jobs' returns (seed 0 first); True when it failed."""
        import math

        from optuna.trial import TrialState

        run_dirs = [_run_dir(r) for r in returns]
        summaries = [RunSummary.read(d).values for d in run_dirs]
        trial.set_user_attr("run_dir", str(run_dirs[0]) if run_dirs[0] else None)
        trial.set_user_attr("run_dirs", [str(d) if d else None for d in run_dirs])
        if run_dirs[0] and (run_dirs[0] / WANDB_RUN_ID).is_file():
            trial.set_user_attr("wandb_run_id", (run_dirs[0] / WANDB_RUN_ID).read_text().strip())
        statuses = [s.get("status", "failed") for s in summaries]
        values = [r.return_value if r.status.name == "COMPLETED" else None for r in returns]
        values = [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
        if statuses[0] == "pruned":
            trial.set_user_attr("status", "pruned")
            study.tell(trial, state=TrialState.PRUNED)
            return False
        if len(values) == self.seeds and len(returns) == self.seeds:
            record = seed_record(self.metric, values, summaries)
            for key, value in record.items():
                trial.set_user_attr(key, value)
            trial.set_user_attr("status", statuses[0])
            study.tell(trial, sum(values) / len(values))
            return False
        bad = [f"seed {k}: {s}" for k, s in enumerate(statuses) if s != "finished"] if self.seeds > 1 else []
        trial.set_user_attr("status", "failed" + (f" ({', '.join(bad)})" if bad else ""))
        study.tell(trial, state=TrialState.FAIL)
        return True

    def sweep(self, arguments: List[str]) -> None:
        import time

        from selfsup.report.studies import study_best_lines
        from selfsup.run.sweep import check_jobs

        space = self.space
        fixed = [a for a in arguments if a.split("=", 1)[0] not in space]
        if self.seeds > 1 and any(override_key(a) == "seed" for a in fixed):
            refuse(
                f"hydra.sweeper.seeds={self.seeds} sets each trial's run seeds (0..{self.seeds - 1}): drop "
                f"the seed= override"
            )
        check_jobs(corners(fixed, space), label="corner of the search space")  # before the first trial, and the storage
        study, storage = self.study()
        study_dir = self.into_study_dir(storage)
        group = study_group(self.study_name, storage)
        states = Counter(t.state.name.lower() for t in study.trials)
        so_far = f" ({', '.join(f'{n} {state}' for state, n in states.items())})" if states else ""
        runs = f", {self.seeds} runs (seeds 0..{self.seeds - 1}) each" if self.seeds > 1 else ""
        log.info(
            f"Optuna study {self.study_name} in {storage}: {len(study.trials)} trials so far{so_far}, "
            f"{self.n_trials} more{runs}"
        )
        command = {
            "id": f"{time.time():.0f}-{id(self)}",
            "overrides": list(arguments),
            "seeds": self.seeds,
            "trials": [],
        }
        self.results(study, storage, command)
        how = {"fixed": fixed, "group": group, "storage": storage, "study_dir": study_dir}
        done, failed = 0, 0
        while done < self.n_trials:
            batch = self.ask(study, min(self.n_jobs, self.n_trials - done))
            command["trials"] += [t.number for t in batch]
            with self.heartbeats(batch):
                returns = self.launch([(t, 0) for t in batch], **how)  # seed 0 reports, and may be pruned
                going = [
                    t
                    for t in batch
                    if returns[(t.number, 0)].status.name == "COMPLETED"
                    and RunSummary.read(_run_dir(returns[(t.number, 0)])).values.get("status") == "finished"
                ]
                for seed in range(1, self.seeds):  # the other seeds of the trials seed 0 finished
                    returns.update(self.launch([(t, seed) for t in going], **how))
            for trial in batch:
                ran = [returns[(trial.number, k)] for k in range(self.seeds) if (trial.number, k) in returns]
                failed += self.tell(study, trial, ran)
            done += len(batch)
            self.results(study, storage, command)
            if failed / done > self.max_failure_rate:
                log.error(
                    f"{failed} of {done} trials failed, more than hydra.sweeper.max_failure_rate="
                    f"{self.max_failure_rate}: the study stops here"
                )
                break
        for line in study_best_lines(study):
            log.info(line)
        self.results(study, storage, command)


def _run_dir(ret) -> Optional[Path]:
    return Path(ret.hydra_cfg.hydra.runtime.output_dir) if ret.hydra_cfg else None
