"""A run's life, in order: fit builds it (selfsup.run.build), trains it with Lightning's Trainer (make_trainer)
with the lab's callbacks (make_callbacks) and loggers, evaluates it, and records how it ended whatever happens
(train_and_evaluate, inside fit): summary.json, outcomes.npz, the verdict, the W&B run and model artifact.
Everything here takes the run's RunSettings (selfsup.run.settings), settled by selfsup.run.cli or a DDP worker."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import threading
import time
import warnings
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from selfsup.common.names import (
    CHECKPOINTS,
    LAST_CHECKPOINT,
    OUTCOMES,
    TOKENIZER,
    RunSummary,
)
from selfsup.common.version import code_version
from selfsup.errors import UserError, error_line
from selfsup.reliability import stop
from selfsup.reliability.checkpoints import check_resume_compatible, resume_state
from selfsup.results.groups import with_margins
from selfsup.results.verdict import verdict_text
from selfsup.run.build import (
    build,
    make,
    objective_name,
    prepare,
    tokenizer_hash,
)
from selfsup.run.run_dir import sweep_of
from selfsup.run.schema import architecture_preset, config_dir
from selfsup.run.settings import RunSettings
from selfsup.training.distributed import leave_distributed

log = logging.getLogger("selfsup")


# ---------------------------------------------------------------------------- fit
def quiet_lightning() -> None:
    """Lightning has its own console handler; without this Hydra's root logger prints each line twice."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).propagate = False
    warnings.filterwarnings("ignore", message=".*(LeafSpec|litlogger|anonymous setting).*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    # val metrics are torchmetrics, synchronised across ranks when computed; Lightning cannot know
    warnings.filterwarnings("ignore", message=".*when logging on epoch level in distributed setting.*")
    # mid-epoch resume is exact: the sampler skips the batches the checkpoint had consumed
    warnings.filterwarnings("ignore", message=".*dataloader is not resumable.*")
    # only a resumed run gets this far with checkpoints already in its dir (a fresh one is refused)
    warnings.filterwarnings("ignore", message=".*Checkpoint directory .* exists and is not empty.*")


def plugins(run_dir: Path) -> list:
    """Atomic checkpoint writes, weights_only loads; on SLURM, Lightning's requeue on SIGUSR1."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    from selfsup.reliability.checkpoint_io import AtomicCheckpointIO

    found = [AtomicCheckpointIO(resume_hint=f"selfsup-train resume={run_dir}")]
    if SLURMEnvironment.detect():
        found.append(SLURMEnvironment(auto_requeue=True, requeue_signal=signal.SIGUSR1))
    return found


def fit(
    settings: RunSettings,
    run_dir: Path,
    rank_zero: bool = True,
    loggers_first: bool = False,
    progress: dict | None = None,
    check=None,
) -> dict:
    """Build and train one run. Rank 0 owns loggers and the run summary; other DDP ranks
    (selfsup.run.worker) train alongside without either. progress["training"] is set once training starts:
    a resume refused before that leaves its run dir (summary.json, W&B run) as it was. check: a sweep job's checks
    (settle), run once its W&B run has started, so that a job they refuse is a failed W&B run."""
    progress = {} if progress is None else progress
    began = time.perf_counter()
    # a single run reads its data (RunDirGuard built its cache) before it starts a W&B run (a sweep job after:
    # a failed job is a failed W&B run), and before Lightning is imported: bad data is refused in seconds
    ready = None if loggers_first else prepare(settings, quiet=True)
    # Lightning, and the modules that import it, are imported here, not at the top: Lightning takes ~5-14 s, and
    # selfsup-train refuses bad settings and data before that
    import lightning as L
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from selfsup.run.loggers import finish_wandb, make_loggers

    L.seed_everything(settings.seed, workers=True, verbose=False)
    quiet_lightning()
    env_before = set(os.environ)
    summary = {
        "objective": objective_name(settings.objective),
        "architecture": settings.family,
        "architecture_preset": architecture_preset(settings.architecture),
        "swept": swept_values(settings),
        **({"init_from": settings.init_from} if settings.init_from else {}),
        "run_dir": str(run_dir),
        "code": code_version(),
        "status": "failed",
        "error": None,
    }
    # in a sweep the loggers come first, so that a job failing at build time is a failed W&B run;
    # a single run checks its settings and data first (a typo makes no W&B run)
    loggers = make_loggers(settings, run_dir) if rank_zero and loggers_first else []
    before_sigterm = stop_on_sigterm(SIGTERMException)
    try:
        train_and_evaluate(settings, run_dir, ready, loggers, summary, progress, rank_zero, loggers_first, check)
    except (KeyboardInterrupt, SystemExit) as err:
        # Lightning turns Ctrl-C into sys.exit(1), and a second SIGTERM (the first one preempts) into its
        # SIGTERMException, a SystemExit with status 0: either is an interrupted run, exit 130 / 143
        error = "interrupted by SIGTERM" if isinstance(err, SIGTERMException) else "interrupted (Ctrl-C)"
        stop.note(signal.SIGTERM if isinstance(err, SIGTERMException) else signal.SIGINT)
        summary.update(status="interrupted", error=error)
        if rank_zero:
            print(f"{error}: continue the run with selfsup-train resume={run_dir}", file=sys.stderr, flush=True)
        raise SystemExit(143 if isinstance(err, SIGTERMException) else 130) from None
    except Exception as err:  # recorded in the run dir and W&B, then re-raised
        summary["error"] = error_line(err) if isinstance(err, UserError) else f"{type(err).__name__}: {err}"
        raise
    finally:
        if before_sigterm is not None:
            signal.signal(signal.SIGTERM, after_run)
        summary.update(
            wall_seconds=round(time.perf_counter() - began, 1),
            wandb_dir=finish_wandb(loggers, 0 if summary["status"] in ("finished", "preempted") else 1),
        )
        if rank_zero and (not settings.resume or progress.get("training")):
            RunSummary(summary).write(run_dir)
        if rank_zero:
            leave_distributed(env_before)
    return summary


def train_and_evaluate(
    settings: RunSettings,
    run_dir: Path,
    ready,
    loggers: list,
    summary: dict,
    progress: dict,
    rank_zero: bool,
    loggers_first: bool,
    check,
) -> None:
    """fit's work, in order: W&B's run started, the run built, the Trainer fitted (and a resumed run that had
    stopped in its final validation validated), the evaluation's outcomes, the verdict and the model artifact
    kept. `loggers` (started in place) and `summary` (with its status) are fit's, for it to close either way."""
    from selfsup.run.loggers import make_loggers, start_wandb, wandb_summary

    loggers[:] = start_wandb(loggers, run_dir)
    if check is not None:  # a sweep job: checked now that its W&B run exists (a single run: in hydra_main)
        check()
    run = build(settings, ready)
    dm, module = run.data, run.module
    keep_resume_record(settings, run, run_dir, rank_zero)
    if rank_zero and not loggers_first:
        loggers[:] = start_wandb(make_loggers(settings, run_dir), run_dir)
    summary["parameters"] = run.model.num_parameters()
    if run.parent is not None:  # continued pretraining: the lineage, in summary.json and W&B
        from selfsup.run.loggers import use_parent_model

        summary["parent"] = run.parent.record()
        use_parent_model(loggers, run.parent)
    callbacks = make_callbacks(settings, run_dir)

    def preempted():  # the signal that preempted the run, if one did (callbacks.preemption may be dropped)
        return getattr(callbacks.get("preemption"), "preempted", None)

    trainer = make_trainer(settings, run_dir, loggers, list(callbacks.values()), rank_zero)
    log_shape(settings, run, trainer, loggers, summary)
    progress["training"] = True
    validate_at_start(settings, trainer, module, dm, summary)
    trainer.fit(module, datamodule=dm, ckpt_path=settings.ckpt_path)
    if "val/loss" not in trainer.callback_metrics and trainer.global_step and not preempted():
        # resumed from a checkpoint of its last step (killed in the final validation): nothing trained,
        # so nothing validated; the final validation and evaluation run now
        trainer.validate(module, datamodule=dm, verbose=False)
    summary.update(trained_values(trainer, module, callbacks))
    if run.parent is not None:  # the chain as one arm, and its totals (what equal-compute comparisons count)
        summary.update(
            chain=run.parent.chain(summary["objective"], summary["steps"]),
            chain_steps=run.parent.chain_steps + summary["steps"],
            chain_tokens_seen=run.parent.tokens + summary["tokens_seen"],
            chain_flops_seen=run.parent.flops + summary["flops_seen"],
        )
    pruning = callbacks.get("pruning")
    status = "preempted" if preempted() else "pruned" if pruning is not None and pruning.pruned else "finished"
    summary["status"] = status
    outcomes = module.evaluation.outcomes() if rank_zero and module.evaluation is not None else {}
    if outcomes:
        save_outcomes(run_dir, with_margins(outcomes, summary.get("eval") or {}))
    if status == "finished":
        summary["verdict"] = verdict_text([{**summary, "status": status}])
        wandb_summary(loggers, {"verdict": summary["verdict"]})
        sweep = sweep_of(run_dir) if loggers_first and rank_zero else None
        if sweep is not None:  # the sweep's verdict over its jobs so far and this one (the last job's: all of them)
            from selfsup.results.summary import read_summaries

            rows = [r for r in read_summaries(sweep) if Path(r["run_dir"]).resolve() != Path(run_dir).resolve()]
            text = verdict_text([*rows, {**summary, "status": status, "run_dir": str(run_dir)}])
            if text:
                wandb_summary(loggers, {"sweep_verdict": text})
    if rank_zero and settings.logger.log_model:
        log_model(
            loggers, run_dir, settings.resolved, summary, export=settings.logger.log_export and not preempted()
        )  # the final model
    if preempted():
        summary["preempted_by"] = preempted()
        mark_preempting(loggers)


def log_shape(settings: RunSettings, run, trainer, loggers: list, summary: dict) -> None:
    """The run's size and batch, into the summary and each logger's hyperparameters (beside the config)."""
    summary.update(
        world_size=trainer.world_size,
        batch_size_per_device=settings.data.batch_size,
        global_batch_size=settings.data.batch_size * settings.trainer.accumulate * trainer.world_size,
    )
    shape = ("parameters", "code", "world_size", "batch_size_per_device", "global_batch_size")
    sizes = {"vocab_size": run.data.corpus.vocab.size, "raw_length": run.objective.raw_length}
    for lg in loggers:
        lg.log_hyperparams({**{k: summary[k] for k in shape}, **sizes})


def validate_at_start(settings: RunSettings, trainer, module, dm, summary: dict) -> None:
    """trainer.validate_at_start (null: a run from init.from): val/... and the evaluation's eval/... at step 0, the
    model as it starts (a resume does not); summary.json's start_val_loss and start_eval."""
    wanted = settings.trainer.validate_at_start
    if (bool(settings.init_from) if wanted is None else wanted) and not settings.ckpt_path:
        trainer.validate(module, datamodule=dm, verbose=False)
        summary["start_val_loss"] = float(trainer.callback_metrics["val/loss"])
        if getattr(module, "last_eval", None) is not None:
            summary["start_eval"] = module.last_eval[1]
            del module.last_eval  # the run's eval/... are its last evaluation's (trained_values)


def keep_resume_record(settings: RunSettings, run, run_dir: Path, rank_zero: bool) -> None:
    """What a checkpoint keeps to be resumed and loaded on its own (its settings' record and the tokenizer, also
    written to the run dir); a ckpt_path of another objective, architecture, data or tokenizer is refused."""
    corpus = run.data.corpus
    digest = tokenizer_hash(corpus)
    run.module.resume_record = resume_state(settings.resolved, corpus.vocab.size, digest, run.model.max_len)
    run.module.resume_record["tokenizer"] = corpus.tokenizer.to_str()  # selfsup.load reads it
    if rank_zero:
        corpus.tokenizer.save(str(run_dir / TOKENIZER))
    if settings.ckpt_path:
        check_resume_compatible(settings.ckpt_path, settings.resolved, corpus.vocab.size, digest)


def mark_preempting(loggers: list) -> None:
    """Tell W&B the run was preempted (its run resumes, it is not a crash)."""
    for lg in loggers:
        if hasattr(lg, "experiment") and hasattr(lg.experiment, "mark_preempting"):
            lg.experiment.mark_preempting()


def make_callbacks(settings: RunSettings, run_dir: Path) -> dict:
    """The run's Trainer callbacks by name, in the order the Trainer calls them: the callbacks group's (conf/callbacks/,
    each with the run's own arguments here), then an Optuna trial's pruning and the console."""
    t = settings.trainer
    lower = f"optim.lr={min(settings.optim.get('lr', 1e-2) / 10, 1e-3):g}"
    runtime = {
        "best": {"dirpath": run_dir / CHECKPOINTS},
        "last": {
            "path": run_dir / LAST_CHECKPOINT,
            **({} if t.checkpoint_every_n_steps else {"every_n_steps": t.val_check_interval}),
        },
        "guard": {
            "resume_hint": f"selfsup-train resume={run_dir} {lower}",
            "restart_hint": " ".join(["selfsup-train", *command_overrides(), lower]),
        },
        "preemption": {"dirpath": run_dir / CHECKPOINTS, "resume_hint": f"selfsup-train resume={run_dir}"},
        "throughput": {"window_size": min(20, max(2, t.log_every_n_steps))},
    }
    nodes = settings.callbacks
    if nodes is None:  # the record of a run from before the callbacks group (a resume): these were its own
        recorded = {**settings.resolved, "callbacks": OmegaConf.load(config_dir() / "callbacks" / "default.yaml")}
        nodes = OmegaConf.to_container(OmegaConf.create(recorded), resolve=True)["callbacks"]
    callbacks = {
        name: make(node, f"callbacks.{name}", **runtime.get(name, {}))
        for name, node in (nodes or {}).items()
        if node is not None
    }
    if settings.trial:  # a trial of the selfsup_optuna sweeper: reported at validations, maybe pruned
        from selfsup.training.tune import TrialPruning

        callbacks["pruning"] = TrialPruning(settings.trial, settings.optimized_metric)
    if t.progress_bar:
        from selfsup.training.console import ConsoleProgress, every_n_steps

        callbacks["console"] = ConsoleProgress(
            t.progress_every_n_steps or every_n_steps(t.max_steps, t.log_every_n_steps)
        )
    return callbacks


def strategy(settings: RunSettings, run_dir: Path, rank_zero: bool):
    """The trainer's strategy (selfsup.training.distributed.strategy_for); for ddp and fsdp rank zero first writes
    the job's resolved config, which the ranks > 0 train from."""
    from selfsup.training.distributed import resolved_config_path, strategy_for

    if rank_zero and settings.trainer.strategy in ("ddp", "fsdp"):
        resolved_config_path(run_dir).parent.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(OmegaConf.create(settings.resolved), resolved_config_path(run_dir))
    return strategy_for(settings.trainer.strategy, run_dir)


def not_an_advert(record: logging.LogRecord) -> bool:
    return "litlogger" not in record.getMessage()


def make_trainer(settings: RunSettings, run_dir: Path, loggers: list, callbacks: list, rank_zero: bool):
    """Lightning's Trainer from the trainer group: no sanity validation, no model summary, the lab's own
    distributed sampler, checkpoint IO and strategies; without Lightning's advertisement for its cloud logger (a
    line of 232 columns: the console's lines fit 100)."""
    import lightning as L

    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(not_an_advert)
    t = settings.trainer
    return L.Trainer(
        accelerator=t.accelerator,
        devices=t.devices,
        num_nodes=t.num_nodes,
        strategy=strategy(settings, run_dir, rank_zero),
        use_distributed_sampler=False,
        precision=t.precision,
        max_steps=t.max_steps,
        val_check_interval=t.val_check_interval,
        check_val_every_n_epoch=None,
        limit_val_batches=t.limit_val_batches,
        log_every_n_steps=t.log_every_n_steps,
        logger=loggers or False,
        callbacks=callbacks,
        plugins=plugins(run_dir),
        enable_progress_bar=t.progress_bar,
        default_root_dir=str(run_dir),
        num_sanity_val_steps=0,
        enable_model_summary=False,
    )


def trained_values(trainer, module, callbacks: dict) -> dict:
    """What the run summary records of training and of its last validation and evaluation."""
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    evaluation = module.evaluation
    return dict(
        steps=trainer.global_step,
        val_loss=metrics.get("val/loss"),
        val_perplexity=metrics.get("val/perplexity"),
        val_accuracy=metrics.get("val/accuracy"),
        signal_per_token=metrics.get("val/signal_per_token", metrics.get("train/signal_per_token")),
        tokens_seen=module.tokens_seen,
        targets_seen=module.targets_seen,
        flops_seen=module.flops_seen,
        # the evaluation's own values (float64; the logged ones went through float32 tensors)
        eval={
            **{k: v for k, v in metrics.items() if k.startswith("eval/")},
            **getattr(module, "last_eval", (None, {}))[1],
        },
        eval_seconds=round(evaluation.seconds, 2) if evaluation else None,
        eval_part_seconds={k: round(v, 2) for k, v in evaluation.part_seconds.items()} if evaluation else {},
        eval_estimated_seconds=round(evaluation.estimated, 2) if evaluation and evaluation.estimated else None,
        pairs_scorers=evaluation.pair_scorers() if evaluation else {},
        tokens_per_sec=callbacks["throughput"].tokens_per_sec() if "throughput" in callbacks else None,
        best_checkpoint=callbacks["best"].best_model_path if "best" in callbacks else "",
        last_checkpoint=str(callbacks["last"].path) if "last" in callbacks else None,
    )


def log_model(loggers: list, run_dir: Path, config: dict, summary: dict, export: bool = False) -> None:
    """logger.log_model: the best and last checkpoints and tokenizer.json as a W&B model artifact; with
    logger.log_export, also the Hugging Face export of the best checkpoint (written to <run dir>/hf)."""
    from selfsup.reliability.redact import redact
    from selfsup.run.loggers import SafeWandbLogger

    wandb_loggers = [lg for lg in loggers if isinstance(lg, SafeWandbLogger)]
    files = list(
        dict.fromkeys(
            Path(p)
            for p in (summary.get("best_checkpoint"), summary.get("last_checkpoint"), run_dir / TOKENIZER)
            if p and Path(p).is_file()
        )
    )
    metadata = {
        "config": redact(config),
        "steps": summary.get("steps"),
        "val_loss": summary.get("val_loss"),
        "eval": summary.get("eval"),
        "code": summary.get("code"),
    }
    for lg in wandb_loggers:
        if files:
            lg.log_checkpoints(files, metadata)
    if export and wandb_loggers and files:
        from selfsup.interop.export import export as export_model

        target = run_dir / "hf"
        previous = target.with_name(f".hf-previous-{os.getpid()}")
        if target.exists():  # the export of an earlier segment of a resumed run: replaced by this one
            target.rename(previous)
        try:
            done = export_model(summary.get("best_checkpoint") or summary["last_checkpoint"], target)
        except UserError as err:
            if previous.exists():
                previous.rename(target)
            print(f"warning: logger.log_export: {err}", file=sys.stderr)
            return
        shutil.rmtree(previous, ignore_errors=True)
        for lg in wandb_loggers:
            lg.log_checkpoints(
                sorted((run_dir / "hf").iterdir()), {**metadata, "transformers_class": done["class"]}, name="hf"
            )


def stop_on_sigterm(SIGTERMException):
    """Until training starts (then the PreemptionHandler saves a checkpoint first), SIGTERM stops the run
    through its exit path ("interrupted", exit 143: Lightning's SIGTERMException) instead of killing it
    unrecorded. The previous handler, or None outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop_now(signum, frame):
        stop.note(signum)
        raise SIGTERMException(143)

    return signal.signal(signal.SIGTERM, stop_now)


def after_run(signum, frame) -> None:
    """SIGTERM once the run has ended (its status is decided): noted, so that a sweep starts no further job, while
    the run's records are written; a second one ends the process at once (the default action)."""
    print(
        f"received {stop.note(signum)}: the run has ended; writing its records, then stopping (send it again to "
        f"stop at once)",
        file=sys.stderr,
        flush=True,
    )
    signal.signal(signum, signal.SIG_DFL)


def save_outcomes(run_dir: Path, outcomes: dict) -> None:
    """The evaluation's per-example outcomes as <run_dir>/outcomes.npz (selfsup.results.verdict compares runs on
    them), written atomically."""
    import numpy as np

    tmp = run_dir / f".{OUTCOMES}.tmp"
    try:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, **outcomes)
        os.replace(tmp, run_dir / OUTCOMES)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        log.warning(f"could not write {run_dir / OUTCOMES}: {err.strerror}")


def command_overrides() -> list[str]:
    """This job's key=value overrides, less those naming its run dir, resume, checkpoint or learning rate
    (to repeat it as a new run); empty outside Hydra (a DDP worker)."""
    if not HydraConfig.initialized():
        return []
    drop = ("hydra.run.dir=", "hydra.sweep.dir=", "resume=", "ckpt_path=", "optim.lr=")
    return [o for o in HydraConfig.get().overrides.task if not o.startswith(drop)]


def swept_values(settings: RunSettings) -> dict:
    """{key: value} of the settings this sweep varies (selfsup.run.sweep sets SELFSUP_SWEPT), seed included;
    config groups (objective=..., architecture=...) have their own columns."""
    out = {}
    choices = dict(HydraConfig.get().runtime.choices) if HydraConfig.initialized() else {}
    for key in filter(None, os.environ.get("SELFSUP_SWEPT", "").split(",")):
        value = settings.get(key)
        if value is None and choices.get(key) is not None:  # a group that is no setting (arm=clm_then_mlm)
            value = choices[key]
        if not isinstance(value, dict):
            out[key] = value
    return out
