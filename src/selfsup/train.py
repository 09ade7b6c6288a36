"""selfsup-train: the Hydra entry point. Compose, check compatibility, build, fit, summarise.

    selfsup-train objective=clm trainer.max_steps=100
    selfsup-train -m objective=mlm,clm,span_corruption
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import signal
import sys
import threading
import traceback
import warnings
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, ListConfig, OmegaConf

from selfsup.checks import SelfSupError, check_settings, config_error_line, user_errors
from selfsup.config import launched_rank, register
from selfsup.wandb_utils import finish_wandb, make_loggers, start_wandb

log = logging.getLogger("selfsup")
CONF_DIR = Path(os.environ.get("SELFSUP_CONF", Path(__file__).resolve().parents[2] / "conf"))


# ---------------------------------------------------------------------------- build and fit
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


def make_objective(cfg: DictConfig, vocab):
    from selfsup.objectives import build_objective
    o = cfg.objective
    params = {"mlm": dict(mask_rate=o.mask_rate, mask_token_prob=o.mask_token_prob,
                          random_token_prob=o.random_token_prob, whole_word=o.whole_word),
              "span_corruption": dict(mask_rate=o.mask_rate, mean_span_length=o.mean_span_length),
              "ul2": dict(denoisers=OmegaConf.to_container(o.denoisers), mode_tokens=o.mode_tokens)}.get(o.name, {})
    return build_objective(o.name, vocab, cfg.data.seq_len, cfg.architecture.name, **params)


def check_objective(cfg: DictConfig) -> None:
    """The objective's parameters, before any data is read (whole-word MLM needs the tokenizer: at build)."""
    if not cfg.objective.whole_word:
        from selfsup.data.vocab import Vocab
        make_objective(cfg, Vocab(size=max(cfg.data.vocab_size, 1_000_000), n_sentinels=cfg.data.n_sentinels))


def make_evaluation(cfg: DictConfig):
    """The `eval` group's Evaluation (instantiated from its _target_), or None when it evaluates nothing
    (eval=none: no fixed exam, no tasks)."""
    if cfg.get("eval") is None or not (cfg.eval.fixed or cfg.eval.tasks):
        return None
    import inspect

    from hydra.utils import instantiate

    from selfsup.evaluation import EvalError, Task
    conf = OmegaConf.to_container(cfg.eval, resolve=True)
    for name, task in (conf.get("tasks") or {}).items():
        if not isinstance(task, dict):
            raise EvalError(f"eval.tasks.{name} must be a mapping of task settings, e.g. "
                            f"'+eval.tasks.{name}={{source: text_files, paths: [examples.jsonl]}}'")
        task.setdefault("_target_", "selfsup.evaluation.Task")
        if task["_target_"] == "selfsup.evaluation.Task":
            known = [p for p in inspect.signature(Task).parameters if p != "name"]
            unknown = [k for k in task if k != "_target_" and k not in known]
            if unknown:
                raise EvalError(f"eval.tasks.{name}.{unknown[0]} is not a task setting: use {', '.join(known)}")
    return instantiate(conf)


def prepare_data(cfg: DictConfig):
    """(Corpus with its token cache built or reused and cut into windows, objective, evaluation): every
    data check, without Lightning (a single run does this before importing it: bad data is refused in
    seconds); the evaluation's tasks are read and checked against the pretraining documents."""
    from selfsup.data import Corpus
    d = cfg.data
    corpus = Corpus(source=d.source, paths=list(d.paths), text_field=d.text_field, hf_name=d.hf_name,
                    hf_config=d.hf_config, hf_split=d.hf_split,
                    data_files=list(d.data_files) if d.data_files else None, streaming=d.streaming,
                    max_documents=d.max_documents, vocab_size=d.vocab_size, n_sentinels=d.n_sentinels,
                    val_fraction=d.val_fraction, batch_size=d.batch_size, num_workers=d.num_workers,
                    cache_dir=d.cache_dir, seed=cfg.seed)
    objective = make_objective(cfg, corpus.prepare())
    corpus.set_window(objective.raw_length, cfg.trainer.accumulate)
    evaluation = make_evaluation(cfg)
    if evaluation is not None:
        evaluation.check(corpus.training_hashes, sharded=cfg.trainer.strategy == "fsdp")
    return corpus, objective, evaluation


def build(cfg: DictConfig, prepared=None):
    """(data module, objective, model, LightningModule); prepared: prepare_data(cfg) if already done."""
    from selfsup.data import SelfSupDataModule
    from selfsup.models import build_model
    from selfsup.module import SelfSupModule
    corpus, objective, evaluation = prepared or prepare_data(cfg)
    dm = SelfSupDataModule.from_corpus(corpus)
    vocab = dm.vocab
    a = cfg.architecture
    # positions for the objective's sequences and for data.seq_len ones (the fixed exam's, the probe's)
    shape = dict(d_model=a.d_model, n_layers=a.n_layers, n_heads=a.n_heads, d_ff=a.d_ff, dropout=a.dropout,
                 tie_embeddings=a.tie_embeddings, n_decoder_layers=a.n_decoder_layers,
                 activation_checkpointing=a.activation_checkpointing, activation=a.activation, bias=a.bias)
    try:
        model = build_model(a.name, vocab.size, max(objective.model_length, cfg.data.seq_len), **shape)
    except ValueError as err:
        raise SelfSupError(f"architecture: {err}") from None
    if cfg.trainer.compile:
        # Dynamo keeps compiled graphs per code object across models: the jobs of a multirun in one process
        # (e.g. a d_model sweep) would add theirs to one cache until its recompile limit, then run eagerly
        import torch._dynamo
        torch._dynamo.reset()
        model.compile()  # in place: checkpoints keep plain parameter names
    if evaluation is not None:
        evaluation.setup(a.name, vocab, dm.tokenizer, cfg.data.seq_len, dm.val_tokens, model.max_len, cfg.seed,
                         make_model=lambda: build_model(a.name, vocab.size, model.max_len, **shape))
    t = cfg.trainer
    module = SelfSupModule(model, objective, lr=t.lr, weight_decay=t.weight_decay, betas=tuple(t.betas),
                           warmup_steps=t.warmup_steps, max_steps=t.lr_decay_steps or t.max_steps,
                           min_lr_ratio=t.min_lr_ratio, grad_clip=t.grad_clip, accumulate=t.accumulate,
                           seed=cfg.seed, max_tokens=t.max_tokens, max_flops=t.max_flops, evaluation=evaluation)
    return dm, objective, model, module


def plugins() -> list:
    """Atomic checkpoint writes, weights_only loads; on SLURM, Lightning's requeue on SIGUSR1."""
    import signal

    from lightning.fabric.plugins.environments import SLURMEnvironment

    from selfsup.reliability import AtomicCheckpointIO
    found = [AtomicCheckpointIO(dir_setting="hydra.run.dir")]
    if SLURMEnvironment.detect():
        found.append(SLURMEnvironment(auto_requeue=True, requeue_signal=signal.SIGUSR1))
    return found


def fit(cfg: DictConfig, run_dir: Path, rank_zero: bool = True, loggers_first: bool = False,
        progress: dict | None = None) -> dict:
    """Build and train one run. Rank 0 owns loggers and the run summary; other DDP ranks
    (selfsup.worker) train alongside without either. progress["training"] is set once training starts:
    a resume refused before that leaves its run dir (summary.json, W&B run) as it was."""
    progress = {} if progress is None else progress
    # a single run checks its data before Lightning is imported (a sweep job: after its W&B run starts)
    prepared = None if loggers_first else prepare_data(cfg)
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint, RichProgressBar

    from selfsup.distributed import strategy_for
    from selfsup.reliability import (LastCheckpoint, NonFiniteGuard, PreemptionHandler, check_resume_compatible,
                                     resume_state)
    from selfsup.throughput import TokenThroughput

    L.seed_everything(cfg.seed, workers=True, verbose=False)
    quiet_lightning()
    t = cfg.trainer
    env_before = set(os.environ)
    # in a sweep the loggers come first, so that a job failing at build time is a failed W&B run;
    # a single run checks its settings and data first (a typo makes no W&B run)
    loggers = make_loggers(cfg, run_dir) if rank_zero and loggers_first else []
    status, error = "failed", None
    summary = {"objective": cfg.objective.name, "architecture": cfg.architecture.name, "swept": swept_values(cfg),
               "run_dir": str(run_dir)}
    preemption = PreemptionHandler(dirpath=run_dir / "checkpoints", resume_hint=f"selfsup-train resume={run_dir}")
    before_sigterm = stop_on_sigterm()
    try:
        loggers = start_wandb(loggers, run_dir)
        if loggers_first:  # a sweep job: checked now that its W&B run exists (a single run: in hydra_main)
            check_settings(cfg)
            check_objective(cfg)
        dm, objective, model, module = build(cfg, prepared)
        tokenizer_hash = hashlib.sha256(dm.tokenizer.to_str().encode()).hexdigest()
        plain = OmegaConf.to_container(cfg, resolve=True)
        module.resume_record = resume_state(plain, dm.vocab.size, tokenizer_hash)
        if cfg.ckpt_path:  # refuse a checkpoint of another objective, architecture, data or tokenizer
            check_resume_compatible(cfg.ckpt_path, plain, dm.vocab.size, tokenizer_hash)
        if rank_zero and not loggers_first:
            loggers = make_loggers(cfg, run_dir)
            loggers = start_wandb(loggers, run_dir)
        summary["parameters"] = model.num_parameters()
        best = ModelCheckpoint(dirpath=run_dir / "checkpoints", filename="best-step{step:06d}",
                               auto_insert_metric_name=False, monitor="val/loss", mode="min", save_top_k=1)
        last = LastCheckpoint(run_dir / "checkpoints" / "last.ckpt", t.checkpoint_every_n_steps or t.val_check_interval)
        lower = f"optim.lr={min(t.lr / 10, 1e-3):g}"
        guard = NonFiniteGuard(t.nonfinite, t.nonfinite_max_skips, resume_hint=f"selfsup-train resume={run_dir} {lower}",
                               restart_hint=" ".join(["selfsup-train", *command_overrides(), lower]))
        callbacks = [best, last, guard, preemption,
                     TokenThroughput(window_size=min(20, max(2, t.log_every_n_steps)))]
        if t.progress_bar and sys.stdout.isatty():
            callbacks.append(RichProgressBar())
        trainer = L.Trainer(accelerator=t.accelerator, devices=t.devices, num_nodes=t.num_nodes,
                            strategy=strategy_for(cfg, run_dir, rank_zero), use_distributed_sampler=False,
                            precision=t.precision, max_steps=t.max_steps, val_check_interval=t.val_check_interval,
                            check_val_every_n_epoch=None, limit_val_batches=t.limit_val_batches,
                            log_every_n_steps=t.log_every_n_steps, logger=loggers or False, callbacks=callbacks,
                            plugins=plugins(), enable_progress_bar=t.progress_bar, default_root_dir=str(run_dir),
                            num_sanity_val_steps=0, enable_model_summary=False)
        summary.update(world_size=trainer.world_size, batch_size_per_device=cfg.data.batch_size,
                       global_batch_size=cfg.data.batch_size * t.accumulate * trainer.world_size)
        for lg in loggers:
            lg.log_hyperparams({"parameters": summary["parameters"], "vocab_size": dm.vocab.size,
                                "raw_length": objective.raw_length, "world_size": trainer.world_size,
                                "batch_size_per_device": cfg.data.batch_size,
                                "global_batch_size": summary["global_batch_size"]})
        progress["training"] = True
        trainer.fit(module, datamodule=dm, ckpt_path=cfg.ckpt_path)
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        summary.update(steps=trainer.global_step, val_loss=metrics.get("val/loss"),
                       val_perplexity=metrics.get("val/perplexity"), val_accuracy=metrics.get("val/accuracy"),
                       signal_per_token=metrics.get("train/signal_per_token"),
                       tokens_seen=module.tokens_seen, targets_seen=module.targets_seen, flops_seen=module.flops_seen,
                       eval={k: v for k, v in metrics.items() if k.startswith("eval/")},
                       eval_seconds=round(module.evaluation.seconds, 2) if module.evaluation else None,
                       tokens_per_sec=module.fit_tokens_per_sec(),
                       best_checkpoint=best.best_model_path, last_checkpoint=str(last.path))
        status = "preempted" if preemption.preempted else "finished"
        if preemption.preempted:
            summary["preempted_by"] = preemption.preempted
            for lg in loggers:
                if hasattr(lg, "experiment") and hasattr(lg.experiment, "mark_preempting"):
                    lg.experiment.mark_preempting()
    except (KeyboardInterrupt, SystemExit) as err:
        # Lightning turns Ctrl-C into sys.exit(1), and a second SIGTERM (the first one preempts) into its
        # SIGTERMException, a SystemExit with status 0: either is an interrupted run, exit 130 / 143
        from lightning.pytorch.utilities.exceptions import SIGTERMException
        status = "interrupted"
        error = "interrupted by SIGTERM" if isinstance(err, SIGTERMException) else "interrupted (Ctrl-C)"
        raise SystemExit(143 if isinstance(err, SIGTERMException) else 130) from None
    except Exception as err:  # recorded in the run dir and W&B, then re-raised
        error = str(err) if isinstance(err, user_errors()) else f"{type(err).__name__}: {err}"
        raise
    finally:
        if before_sigterm is not None:
            signal.signal(signal.SIGTERM, before_sigterm)
        summary.update(status=status, error=error,
                       wandb_dir=finish_wandb(loggers, 0 if status in ("finished", "preempted") else 1))
        if rank_zero and (not cfg.resume or progress.get("training")):
            write_summary(run_dir, summary)
        if rank_zero:
            leave_distributed(env_before)
    return summary


def stop_on_sigterm():
    """Until training starts (then the PreemptionHandler saves a checkpoint first), SIGTERM stops the run
    through its exit path ("interrupted", exit 143) instead of killing it unrecorded. The previous handler,
    or None outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    def stop(signum, frame):
        raise SIGTERMException(143)
    return signal.signal(signal.SIGTERM, stop)


def write_summary(run_dir: Path, summary: dict) -> None:
    """summary.json as strict JSON (null for NaN and infinities), written atomically: valid or absent (a full
    disk keeps the previous file); a finished run's stale error.txt goes."""
    def strict(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: strict(v) for k, v in value.items()}
        return [strict(v) for v in value] if isinstance(value, list) else value
    tmp = run_dir / ".summary.json.tmp"
    try:
        tmp.write_text(json.dumps(strict(summary), indent=2, allow_nan=False))
        os.replace(tmp, run_dir / "summary.json")
        if summary.get("status") == "finished":
            (run_dir / "error.txt").unlink(missing_ok=True)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        log.warning(f"could not write {run_dir / 'summary.json'}: {err.strerror}")


def command_overrides() -> list[str]:
    """This job's key=value overrides, less those naming its run dir, resume, checkpoint or learning rate
    (to repeat it as a new run); empty outside Hydra (a DDP worker)."""
    if not HydraConfig.initialized():
        return []
    drop = ("hydra.run.dir=", "hydra.sweep.dir=", "resume=", "ckpt_path=", "optim.lr=")
    return [o for o in HydraConfig.get().overrides.task if not o.startswith(drop)]


def swept_values(cfg: DictConfig) -> dict:
    """{key: value} of the settings this sweep varies (selfsup.sweep sets SELFSUP_SWEPT), seed included;
    config groups (objective=..., architecture=...) have their own columns."""
    out = {}
    for key in filter(None, os.environ.get("SELFSUP_SWEPT", "").split(",")):
        value = OmegaConf.select(cfg, key, default=None)
        if not isinstance(value, DictConfig):
            out[key] = OmegaConf.to_container(value) if isinstance(value, ListConfig) else value
    return out


def leave_distributed(env_before: set[str]) -> None:
    """Undo what a DDP launch left in this process, so that the next job of a sweep starts clean:
    the launcher's MASTER_*/LOCAL_RANK/... variables (with LOCAL_RANK set, Lightning would think
    another launcher made the processes) and the process group."""
    import torch.distributed as dist
    for key in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "RANK"):
        if key not in env_before:
            os.environ.pop(key, None)
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def print_summary(rows: list[dict]) -> None:
    from selfsup.report import summary_table
    print(summary_table(rows))


def requeue_checkpoint(cfg: DictConfig, run_dir: Path) -> Path | None:
    """The hpc_ckpt_<n>.ckpt Lightning saved in this run dir before SLURM requeued the job."""
    if cfg.resume or cfg.ckpt_path or not os.environ.get("SLURM_JOB_ID"):
        return None
    from selfsup.reliability import slurm_resume_checkpoint
    return slurm_resume_checkpoint(run_dir)


def resumed_config(cfg: DictConfig, run_dir: Path) -> DictConfig:
    """`resume=RUN_DIR`: that run's config, with this command's key=value overrides on top (checked by
    selfsup.rundir.RunDirGuard before Hydra wrote anything), from its last checkpoint; a run that stopped
    before its first checkpoint starts again from step 0 in its dir, as a new W&B run."""
    from selfsup.rundir import merged_config
    merged = merged_config(run_dir, list(HydraConfig.get().overrides.task))
    last = run_dir / "checkpoints" / "last.ckpt"
    merged.resume, merged.ckpt_path = str(run_dir), str(last) if last.is_file() else None
    if not last.is_file():
        log.warning(f"{run_dir} has no checkpoint yet (it stopped before its first one): training it from the "
                    f"start in the same dir")
        (run_dir / "wandb-run-id").unlink(missing_ok=True)
    # what this resume really trains with, beside Hydra's record of the command (.hydra/resume-<time>/)
    record = Path(HydraConfig.get().runtime.output_dir) / HydraConfig.get().output_subdir / "config.yaml"
    if record.parent.is_dir():
        OmegaConf.save(merged, record)
    return merged


JOB_STARTED = []  # set once Hydra has composed a config and started a job: later errors are not config errors


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="train")
def hydra_main(cfg: DictConfig) -> float | None:
    JOB_STARTED.append(True)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    multirun = HydraConfig.get().mode.name == "MULTIRUN"
    earlier_run = (run_dir / "summary.json").exists()  # its files are never touched by a refused run
    # under torchrun or srun every rank runs this app in the same run dir (selfsup.config.run_dir);
    # rank 0 owns the loggers, the summary and the error files, as with selfsup's own launch
    rank = launched_rank()
    progress = {}
    try:
        requeued = requeue_checkpoint(cfg, run_dir)
        if requeued:  # a SLURM job requeued by Lightning after SIGUSR1: same command, same run dir
            cfg.resume, cfg.ckpt_path = str(run_dir), str(requeued)
        elif cfg.resume:
            cfg = resumed_config(cfg, run_dir)
        if not multirun:  # (in a sweep, after its W&B run has started: a failed job is a failed W&B run)
            check_settings(cfg)
            check_objective(cfg)
        summary = fit(cfg, run_dir, rank_zero=rank == 0, loggers_first=multirun, progress=progress)
    except Exception as err:
        user_error = isinstance(err, user_errors())
        message = f"error: {err}" if user_error else f"error: {type(err).__name__}: {err}"
        if rank == 0 and (not earlier_run or progress.get("training")):  # a refused resume changes nothing
            with contextlib.suppress(OSError):  # a full disk: the message still reaches the console
                (run_dir / "error.txt").write_text(message + "\n")
        if multirun:
            # a failing job does not end the sweep: it is recorded (error.txt, summary.json, a failed
            # W&B run). The basic sweeper gets NaN and goes on; Optuna's sweeper needs the exception
            # to record a failed trial (it cannot tell NaN); it stops the study once failed trials
            # exceed hydra.sweeper.max_failure_rate (default 0: the first failure).
            if not user_error:
                with contextlib.suppress(OSError):
                    (run_dir / "traceback.txt").write_text(traceback.format_exc())
            log.error(message)
            if "optuna" in str(HydraConfig.get().sweeper.get("_target_", "")):
                raise
            return float("nan")
        if user_error:
            print(message, file=sys.stderr)
            raise SystemExit(2) from None
        raise
    if not multirun and rank == 0:
        print_summary([summary])
        if summary.get("wandb_dir"):
            print(f"W&B run files: {summary['wandb_dir']}  (upload: wandb sync {summary['wandb_dir']})")
    return optimized_value(cfg, summary)


def optimized_value(cfg: DictConfig, summary: dict) -> float | None:
    """The value of cfg.optimized_metric in a run summary (what a sweep's job returns to its sweeper)."""
    values = {"val/loss": summary.get("val_loss"), "val/perplexity": summary.get("val_perplexity"),
              "val/accuracy": summary.get("val_accuracy"), **(summary.get("eval") or {})}
    return values.get(cfg.optimized_metric)


def main() -> None:
    register()
    logging.raiseExceptions = False  # a log file that cannot be written (a full disk): no traceback per line
    if not CONF_DIR.is_dir():
        sys.exit(f"error: config folder {CONF_DIR} not found: install selfsup with `pip install -e .` "
                 f"from its checkout, or set SELFSUP_CONF to the conf/ folder")
    if not any(arg.startswith(("--config-dir", "-cd")) for arg in sys.argv[1:]):
        sys.argv[1:1] = ["--config-dir", str(CONF_DIR.parent)]  # finds the sweeps/ folder beside conf/
    # Hydra prints a config error over several lines (and exits 1) unless HYDRA_FULL_ERROR is set,
    # in which case it raises: catch it here and give one line, as for every other bad input
    wants_trace = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        hydra_main()
    except Exception as err:
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException
        if wants_trace:
            raise
        if isinstance(err, user_errors()):  # re-raised by a job for Optuna's sweeper
            print(f"error: {err}", file=sys.stderr)
            raise SystemExit(2) from None
        frames = traceback.extract_tb(err.__traceback__)
        hydra_cli = isinstance(err, ValueError) and f"{os.sep}hydra{os.sep}" in frames[-1].filename  # e.g. -m --cfg
        if JOB_STARTED or not (hydra_cli or isinstance(err, (HydraException, OmegaConfBaseException))):
            raise  # a bug, not a config mistake: the whole traceback
        print(f"error: {config_error_line(err)}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
