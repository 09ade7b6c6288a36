"""selfsup-train's loggers: W&B (offline unless configured) and the CSV log, W&B's x-axes, and a W&B run
that never stops training (SafeWandbLogger)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from lightning.pytorch.loggers.logger import DummyExperiment
from omegaconf import OmegaConf

from selfsup.common.names import (
    MULTIRUN,
    TOKENIZER,
    WANDB_DIR,
    WANDB_IDENTITY,
    WANDB_RUN_ID,
    RunSummary,
    override_key,
    shown,
)
from selfsup.common.upstream import drop_anonymous, forget_wandb_run, kill_wandb_service, wandb_run
from selfsup.common.wandb_utils import api_key_configured, wandb_mode
from selfsup.reliability.redact import redact, register_secrets
from selfsup.run.run_dir import sweep_group, sweep_of
from selfsup.run.schema import architecture_preset
from selfsup.run.settings import RunSettings

log = logging.getLogger("selfsup")


# ---------------------------------------------------------------------------- selfsup-train's loggers
def run_identity(settings: RunSettings, run_dir: Path) -> tuple[str, str | None, list[str]]:
    """W&B name, group and tags: the objective, the architecture and the values this sweep varies; the group
    of a sweep is `<sweep or experiment name>-<date>-<time>` (of an Optuna study: passed by its sweeper).
    Kept in the run dir (wandb-identity.json): a resumed run keeps them."""
    kept = run_dir / WANDB_IDENTITY
    if settings.resume and kept.is_file():
        name, group, tags = json.loads(kept.read_text())
        return name, group, tags
    hc = HydraConfig.get()
    swept_keys = set(filter(None, os.environ.get("SELFSUP_SWEPT", "").split(",")))
    swept = [o for o in hc.overrides.task if override_key(o) in swept_keys]
    values = [(o.split("=", 1)[0], shown(o.split("=", 1)[1])) for o in swept]
    objective = settings.objective.get("name") or "objective"
    name = settings.logger.name or "-".join(
        [
            objective,
            architecture_preset(settings.architecture),
            *(f"{k.split('.')[-1]}={v}" for k, v in values if k not in ("objective", "architecture")),
        ]
    )
    group = settings.logger.group
    if group is None and hc.mode.name == "MULTIRUN":
        group = sweep_group(Path(hc.sweep.dir), hc.runtime.choices)
    elif group is None and sweep_of(run_dir) is not None:  # a job a stopped sweep did not run, run on its own
        sweep = sweep_of(run_dir)
        group = sweep_group(sweep, OmegaConf.load(sweep / MULTIRUN).hydra.runtime.choices)
    tags = (
        list(settings.logger.tags)
        + [f"objective={objective}", f"architecture={architecture_preset(settings.architecture)}"]
        + [f"{k}={v}" for k, v in values]
    )
    identity = (redact(name), group, [t[:64] for t in dict.fromkeys(redact(tags))])
    kept.write_text(json.dumps(identity))
    return identity


def make_loggers(settings: RunSettings, run_dir: Path) -> list:
    register_secrets(settings.resolved)  # their values leave every name, tag and record
    logger = settings.logger
    loggers, csv = [], None
    if logger.csv:
        # a resumed run writes its own CSV beside the first (Lightning would overwrite metrics.csv)
        version = "" if not settings.resume else f"resume-{len(list((run_dir / 'csv').glob('resume-*'))) + 1}"
        csv = CSVLogger(save_dir=str(run_dir), name="csv", version=version)
    if logger.wandb:
        if os.environ.get("WANDB_MODE") == "":  # `WANDB_MODE=` means unset (W&B's settings refuse "")
            del os.environ["WANDB_MODE"]
        mode = wandb_mode(logger.mode)
        if mode == "online" and not api_key_configured():
            log.warning(
                "W&B online was asked for but no API key is configured (WANDB_API_KEY or `wandb login`): "
                "logging offline instead; upload later with the `wandb sync` command printed at the end"
            )
            mode = "offline"
        if mode != "disabled":
            os.environ.setdefault("WANDB_SILENT", "true")
            name, group, tags = run_identity(settings, run_dir)
            id_file = run_dir / WANDB_RUN_ID  # a resumed run continues the same W&B run
            if not id_file.exists():
                import secrets
                import string

                id_file.write_text("".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8)))
            loggers.append(
                SafeWandbLogger(  # W&B failing mid-run: one warning, training goes on
                    csv_dir=str(Path(csv.log_dir)) if csv else None,
                    timeout=logger.timeout,
                    save_dir=str(run_dir),
                    project=logger.project,
                    entity=logger.entity,
                    name=name,
                    group=group,
                    tags=tags,
                    mode=mode,
                    config=redact(settings.resolved),
                    job_type="train",
                    id=id_file.read_text().strip(),
                    resume="allow",
                    # W&B records the command line with the run's metadata: not when it holds a secret
                    **({"settings": _wandb().Settings(x_disable_meta=True)} if redact(sys.argv) != sys.argv else {}),
                )
            )
    return loggers + ([csv] if csv else [])


def _wandb():
    """The wandb package, imported when a run uses it (~0.9 s: a logger=csv run never pays it)."""
    import wandb

    return wandb


def define_wandb_axes(loggers: list) -> None:
    """tokens seen and targets seen are x-axes, so objectives compare on the same compute; the code version
    a W&B run file (code-version.json, beside W&B's own requirements.txt: the environment's pip freeze)."""
    from selfsup.common.version import code_version

    for lg in loggers:
        if isinstance(lg, WandbLogger):
            run = lg.experiment
            run.define_metric("train/tokens_seen")
            run.define_metric("train/targets_seen")
            for prefix in ("train", "val", "perf", "eval"):
                run.define_metric(f"{prefix}/*", step_metric="train/tokens_seen")
            if getattr(run, "dir", None):
                (Path(run.dir) / "code-version.json").write_text(json.dumps(code_version()))


def start_wandb(loggers: list, run_dir: Path) -> list:
    """Start the W&B run (and its x-axes). W&B failing never stops training: the CSV log goes on."""
    try:
        define_wandb_axes(loggers)
        return loggers
    except Exception as err:
        log.warning(
            f"W&B could not start ({type(err).__name__}: {err}); training goes on with the CSV log in {run_dir / 'csv'}"
        )
        return [lg for lg in loggers if not isinstance(lg, SafeWandbLogger)]


def wandb_summary(loggers: list, values: dict) -> None:
    """Set values of the W&B run's summary (never raises)."""
    for lg in loggers:
        if isinstance(lg, SafeWandbLogger):
            lg.set_summary(values)


def use_parent_model(loggers: list, parent) -> None:
    """W&B lineage of continued pretraining: the run *uses* its parent's model artifact, `model-<parent's W&B run
    id>` with the files logger.log_model logs (its checkpoints and tokenizer: the same digest, so the same
    version where the parent logged it; else the artifact is made as this run's input). Never raises."""
    summary = RunSummary.read(parent.run_dir).values
    files = [
        Path(p)
        for p in dict.fromkeys(
            [summary.get("best_checkpoint"), summary.get("last_checkpoint"), str(parent.run_dir / TOKENIZER)]
        )
        if p and Path(p).is_file()
    ]
    name = f"model-{parent.wandb_id or parent.run_dir.name}"
    for lg in loggers:
        if isinstance(lg, SafeWandbLogger) and files:
            lg.use_files(files, name, parent.record())


def finish_wandb(loggers: list, exit_code: int) -> str | None:
    """Finish the W&B run (never raises); its local folder, for `wandb sync`, or None."""
    folders = [lg.finish(exit_code) for lg in loggers if isinstance(lg, SafeWandbLogger)]
    return next(filter(None, folders), None)


class SafeWandbLogger(WandbLogger):
    """A WandbLogger whose failures never stop training.

    The first exception from W&B (its service process died, say: every call then raises
    ConnectionResetError), or a call that has not returned after ``timeout`` seconds (a stuck
    service: its process is killed then), prints one warning with the `wandb sync` command for
    what was written, lets go of the W&B service, and from then on this logger does nothing:
    ``experiment`` is Lightning's no-op DummyExperiment. Start the run with ``experiment`` first
    to tell a run that cannot start (the lab does). ``csv_dir``: where the metrics go on, for
    the warning. ``timeout`` None: wait as long as W&B takes.
    """

    def __init__(self, *args, csv_dir: str | None = None, timeout: float | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        drop_anonymous(self)
        self.csv_dir, self.timeout, self.stopped, self.last_step = csv_dir, timeout, None, 0

    @property
    def experiment(self):
        return DummyExperiment() if self.stopped else super().experiment

    def run_folder(self) -> str | None:
        """The run's local folder (what `wandb sync` uploads); None before the run started."""
        run = wandb_run(self)
        if run is None:
            return None
        with contextlib.suppress(Exception):
            return str(Path(run.dir).parent)
        return str(Path(self.save_dir or ".") / WANDB_DIR)

    def _guard(self, call, *args) -> None:
        if self.stopped:
            return
        failed = []  # whatever W&B raises, training goes on
        worker = _call_in_thread(call, *args, errors=failed)
        worker.join(self.timeout)
        if worker.is_alive():  # the service takes the call but never answers: a stuck process
            kill_wandb_service()  # then every W&B call, teardown included, fails at once
            self._stop(TimeoutError(f"its service did not answer in {self.timeout:g} s and was stopped"))
        elif failed:
            self._stop(failed[0])

    def _stop(self, err: Exception) -> None:
        reason = f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
        if isinstance(err, ConnectionError):
            reason = f"its service process is gone ({reason})"
        self.stopped = reason
        goes_on = f"metrics go to the CSV log in {self.csv_dir}" if self.csv_dir else "metrics are not recorded"
        folder = self.run_folder()
        sync = f"sync what was written with `wandb sync {folder}`" if folder else "W&B wrote nothing"
        log.warning(f"W&B stopped at step {self.last_step}: {reason}; training goes on, {goes_on}; {sync}")
        # forgets the dead service and its exit hook (else a traceback at exit); raises
        # ConnectionResetError itself; in a thread, should a stuck service have outlived the kill
        _call_in_thread(_wandb().teardown, errors=[]).join(self.timeout)
        forget_wandb_run(wandb_run(self))  # the next run in this process (a sweep) starts afresh

    def log_hyperparams(self, params) -> None:
        self._guard(super().log_hyperparams, params)

    def log_metrics(self, metrics, step: int | None = None) -> None:
        self.last_step = self.last_step if step is None else step
        self._guard(super().log_metrics, metrics, step)

    def after_save_checkpoint(self, checkpoint_callback) -> None:
        self._guard(super().after_save_checkpoint, checkpoint_callback)

    def finalize(self, status: str) -> None:
        self._guard(super().finalize, status)

    def log_checkpoints(self, files: list[Path], metadata: dict, name: str = "model") -> None:
        """Files (the run's checkpoints with its tokenizer; or its Hugging Face export) as one W&B model artifact,
        `<name>-<run id>`, the run's settings and results as metadata; offline runs keep it for `wandb sync`."""

        def upload():
            run = wandb_run(self)
            artifact = _wandb().Artifact(f"{name}-{run.id}", type="model", metadata=metadata)
            for path in files:
                artifact.add_file(str(path), name=path.name)
            run.log_artifact(artifact, aliases=["latest"])

        if wandb_run(self) is not None:
            self._guard(upload)

    def use_files(self, files: list[Path], name: str, metadata: dict) -> None:
        """Files as a W&B model artifact `name` that this run uses (an input of the run, in W&B's lineage), and
        `metadata` as the run config's `parent`. W&B's use_artifact refuses offline runs; an offline run records the
        artifact as W&B does for the draft artifact use_artifact takes online (use_after_commit), which `wandb sync`
        uploads and marks used. A failure is one warning: the run's logging goes on."""
        run = wandb_run(self)
        if run is None:
            return
        try:
            run.config.update({"parent": metadata}, allow_val_change=True)
            artifact = _wandb().Artifact(name, type="model", metadata=metadata)
            for path in files:
                artifact.add_file(str(path), name=path.name)
            if run.settings._offline:
                run._log_artifact(artifact, aliases=[], is_user_created=True, use_after_commit=True)
            else:
                run.use_artifact(artifact)
        except Exception as err:  # noqa: BLE001 - the lineage is a record; training and its logging go on
            log.warning(f"W&B could not record the parent's model artifact {name} ({type(err).__name__}: {err})")

    def set_summary(self, values: dict) -> None:
        """Values of the run's W&B summary that are not metrics (the verdict's text)."""
        if wandb_run(self) is not None:
            self._guard(lambda: wandb_run(self).summary.update(values))

    def finish(self, exit_code: int) -> str | None:
        """Finish the W&B run (never raises); its local folder, or None when it never started."""
        folder = self.run_folder()
        if folder is not None:
            self._guard(lambda: wandb_run(self).finish(exit_code=exit_code))
        return folder


def _call_in_thread(call, *args, errors: list) -> threading.Thread:
    """Start call(*args) in a daemon thread (a stuck call does not hold the process at exit); an
    Exception it raises is appended to errors."""

    def run():
        try:
            call(*args)
        except Exception as err:  # noqa: BLE001 - reported by the caller
            errors.append(err)

    worker = threading.Thread(target=run, name="selfsup-wandb-call", daemon=True)
    worker.start()
    return worker
