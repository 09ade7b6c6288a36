"""The run dir: checked and claimed before Hydra writes anything into it; resume and SLURM requeue.

`RunDirGuard` is a Hydra callback (conf/train.yaml, hydra.callbacks). At the start of a single run,
before Hydra creates the run dir and writes `.hydra/`, it

- refuses a run dir that is a file, lies under a file, or already holds a run (use resume=);
- for `resume=RUN`: refuses a path that does not exist or is no run dir, overrides of config groups or
  of settings the checkpoint was trained with, and a run that already reached its trainer.max_steps —
  all before anything in RUN changes;
- claims the dir for this process with an exclusive lock on `RUN_DIR/.selfsup.lock` (released when the
  process ends, even by kill -9): a second selfsup-train into the same dir is refused.

Each refusal is one line on stderr and exit status 2. Ranks > 0 of a torchrun/srun job share rank 0's
dir and claim nothing. `resumed_config` then gives the config a resumed run trains with, and
`requeue_checkpoint` the checkpoint a requeued SLURM job continues from.
"""

from __future__ import annotations

import csv
import fcntl
import logging
import os
import sys
from pathlib import Path

from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from selfsup.common.names import (
    CHECKPOINTS,
    HYDRA_RECORD,
    LAST_CHECKPOINT,
    METRICS_CSV,
    MULTIRUN,
    RECORDED_CONFIG,
    SUMMARY,
    WANDB_RUN_ID,
    RunSummary,
    override_key,
)
from selfsup.errors import UserError
from selfsup.training.distributed import launched_rank, shared_job_id

log = logging.getLogger("selfsup")
LOCK = ".selfsup.lock"
_claimed: dict[str, object] = {}  # run dir -> its open, locked lock file (held until the process ends)


class RunDirGuard(Callback):
    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        if launched_rank() != 0:
            return
        overrides, run_dir = list(config.hydra.overrides.task), Path(config.hydra.run.dir)
        created = [p for p in [run_dir, *run_dir.parents] if not p.exists()]  # what claiming it makes
        try:
            if config.resume:
                if run_dir.resolve() != Path(config.resume).resolve():
                    raise UserError(
                        f"resume={config.resume} continues the run in its own dir: drop hydra.run.dir={run_dir}"
                    )
                check_resume_path(run_dir)
                claim(run_dir)  # before reading it: a run still going is "in use"
                check_resume(run_dir, overrides)
                cfg = merged_config(run_dir, overrides)
            else:
                check_new_path(run_dir)
                claim(run_dir)  # at once: under torchrun the other ranks write into the same dir
                if requeue_checkpoint(config, run_dir) is None:  # a requeued SLURM job continues in its dir
                    # the dir of this torchrun/srun launch: its other ranks may have written .hydra/ already
                    ranks = shared_job_id() is not None and shared_job_id() in run_dir.name
                    check_new_run_dir(run_dir, other_ranks_write=ranks)
                from selfsup.run.build import with_init

                # the job's settings (with a checkpoint's, for init.from)
                cfg = with_init(OmegaConf.masked_copy(config, [k for k in config if k != "hydra"]))
            # settings and data, checked before Hydra writes anything: a refused command leaves nothing
            from selfsup.run.build import prepare, settle  # (torch: after the claim, which is fast)

            settings = settle(cfg, overrides)
            corpus = prepare(settings)[0]  # the data's cache built (the run reads it back), or bad data refused
            from selfsup.run.build import continued_from

            continued_from(settings, corpus)  # a run dir it continues fits its tokenizer and budget
            # the checkpoint it starts from was trained on these settings and this data
            checkpoint = resume_checkpoint(run_dir, overrides) if config.resume else settings.ckpt_path
            if checkpoint and Path(checkpoint).is_file():
                from selfsup.reliability.checkpoints import check_resume_compatible
                from selfsup.run.build import tokenizer_hash

                fingerprinted = {k: settings.resolved[k] for k in ("objective", "architecture", "data", "seed")}
                check_resume_compatible(
                    checkpoint,
                    fingerprinted,
                    corpus.vocab.size,
                    tokenizer_hash(corpus),
                    resume=str(run_dir) if config.resume else None,
                    command=overrides,
                )
            own(run_dir)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            unclaim(run_dir, created)
            raise SystemExit(2) from None


def unclaim(run_dir: Path, created: list[Path]) -> None:
    """Take back what claiming a refused run's dir made: its lock, then the folders it created, if empty."""
    if not created:  # the dir was there before: it keeps its lock file
        return
    if release(run_dir):
        (run_dir / LOCK).unlink(missing_ok=True)
    remove_empty(created)


def remove_empty(created: list[Path]) -> None:
    """Remove the folders a claim created, innermost first, while they are empty (one something else wrote into
    stays, with the folders above it)."""
    for folder in created:
        try:
            folder.rmdir()
        except OSError:
            break


def release(run_dir: Path) -> bool:
    """Close this process's lock of run_dir (claim); whether it held one."""
    lock = _claimed.pop(str(run_dir.resolve()), None)
    if lock is not None:
        lock.close()
    return lock is not None


def _file_above(path: Path) -> Path | None:
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            return parent
    return None


def check_new_path(run_dir: Path) -> None:
    """A fresh run's dir can be a folder: it is no file and lies under none."""
    blocker = _file_above(run_dir)
    if blocker == run_dir:
        raise UserError(f"hydra.run.dir={run_dir} is a file: pick a folder for the run")
    if blocker is not None:
        raise UserError(f"hydra.run.dir={run_dir} lies under {blocker}, which is a file: pick another folder")


def check_new_run_dir(run_dir: Path, other_ranks_write: bool = False) -> None:
    """A fresh run's dir is new, or holds no run (other_ranks_write: the ranks of this launch share it, and
    may have written its .hydra/ already)."""
    if (run_dir / SUMMARY).exists() or any((run_dir / CHECKPOINTS).glob("*.ckpt")):
        raise UserError(
            f"{run_dir} already holds a run: nothing was overwritten; continue it with "
            f"resume={run_dir}, or pick a new hydra.run.dir"
        )
    if (run_dir / RECORDED_CONFIG).is_file() and not other_ranks_write:
        raise UserError(
            f"{run_dir} holds a run that stopped before its first checkpoint: nothing was "
            f"overwritten; run it again from the start in that dir with resume={run_dir}, or pick "
            f"a new hydra.run.dir"
        )


def claim(run_dir: Path) -> None:
    """Lock run_dir for this process (creating it); UserError when another process holds it."""
    key = str(run_dir.resolve())
    if key in _claimed:
        return
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = open(run_dir / LOCK, "a+")
    except OSError as err:
        raise UserError(f"cannot create the run dir {run_dir}: {err.strerror}: pick a writable hydra.run.dir") from None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        holder = lock.read().strip() or "?"
        lock.close()
        raise UserError(
            f"{run_dir} is in use by another selfsup-train (pid {holder}): nothing was written; "
            f"wait for it to end, or pick another hydra.run.dir"
        ) from None
    _claimed[key] = lock


def own(run_dir: Path) -> None:
    """Write this process's pid into the claimed dir's lock (once the run goes ahead: a refused run leaves
    the dir byte for byte as it was)."""
    lock = _claimed[str(run_dir.resolve())]
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()


def resume_overrides(overrides: list[str], run_dir: Path | None = None) -> list[str]:
    """The key=value overrides a resume applies on top of the run's config. A config group may be named
    only with the option the run used (repeating the original command); another one is refused."""
    kept = [o for o in overrides if not o.startswith(("resume=", "hydra.", "ckpt_path="))]
    choices = {}
    if run_dir is not None and (run_dir / HYDRA_RECORD).is_file():
        choices = OmegaConf.load(run_dir / HYDRA_RECORD).hydra.runtime.choices
    groups = [o for o in kept if "=" in o and "." not in override_key(o)]
    kept = [o for o in kept if o not in groups]
    groups = [o for o in groups if str(choices.get(o.split("=", 1)[0])) != o.split("=", 1)[1]]
    if groups:
        raise UserError(
            f"resume cannot change config groups ({', '.join(groups)}): the run keeps its "
            f"objective, architecture and data; override single keys such as trainer.max_steps=…"
        )
    return kept


def resume_checkpoint(run_dir: Path, overrides: list[str]) -> Path:
    """The checkpoint a resume continues from: `ckpt_path=` (another checkpoint of the run, e.g. when
    last.ckpt is damaged) or the run's last.ckpt."""
    chosen = [o.split("=", 1)[1] for o in overrides if o.startswith("ckpt_path=")]
    if chosen and chosen[-1] not in ("", "null"):
        path = Path(chosen[-1])
        if not path.is_file():
            raise UserError(
                f"ckpt_path={path} does not exist: pass one of the run's checkpoints, e.g. "
                f"{run_dir / 'checkpoints' / 'last.ckpt'}"
            )
        return path
    return run_dir / LAST_CHECKPOINT


def merged_config(run_dir: Path, overrides: list[str]) -> DictConfig:
    """The run's recorded config with this command's key=value overrides on top (and init.from's settings)."""
    from selfsup.run.build import with_init

    recorded = OmegaConf.load(run_dir / RECORDED_CONFIG)
    tokenizer = run_dir / "tokenizer.json"
    if isinstance(recorded.get("data"), DictConfig) and "fim_tokens" not in recorded.data and tokenizer.is_file():
        # a run recorded before data.fim_tokens: its tokenizer's layout, so that the tokenizer trained again is its own
        recorded.data.fim_tokens = "<fim_prefix>" in tokenizer.read_text()
    return with_init(
        OmegaConf.merge(
            recorded,
            OmegaConf.from_dotlist([o.lstrip("+") for o in resume_overrides(overrides, run_dir)]),
        ),
        run_dir,
    )


def check_resume_path(run_dir: Path) -> None:
    """resume=RUN names the folder of a run."""
    if not run_dir.exists():
        raise UserError(f"resume={run_dir} does not exist: pass the dir of a run, e.g. outputs/<date>/<time>")
    if not run_dir.is_dir():
        raise UserError(
            f"resume={run_dir} is a file, not a run dir: pass the folder that holds the run's .hydra/ and checkpoints/"
        )
    if not (run_dir / RECORDED_CONFIG).is_file():
        raise UserError(
            f"resume={run_dir} is not a selfsup run dir (no .hydra/config.yaml): pass the dir of "
            f"a run, e.g. outputs/<date>/<time>"
        )


def trained_steps(run_dir: Path) -> int:
    """The steps a run dir's records say it trained (summary.json, the CSV log), 0 when they say none."""
    steps = 0
    try:
        steps = int(RunSummary.read(run_dir).values.get("steps") or 0)
    except (ValueError, TypeError):
        pass
    try:
        with open(run_dir / METRICS_CSV, newline="") as f:
            steps = max([steps, *(int(float(row["step"])) for row in csv.DictReader(f) if row.get("step"))])
    except (OSError, ValueError, KeyError, csv.Error):
        pass
    return steps


def check_resume(run_dir: Path, overrides: list[str]) -> None:
    """resume=RUN: refused, with RUN untouched, unless RUN can continue with these overrides."""
    merged = merged_config(run_dir, overrides)
    last = resume_checkpoint(run_dir, overrides)
    if not last.is_file():
        steps, every = (
            trained_steps(run_dir),
            merged.trainer.checkpoint_every_n_steps or merged.trainer.val_check_interval,
        )
        if steps >= every:  # it had a checkpoint, deleted or moved since: training from step 0 would hide that
            raise UserError(
                f"resume={run_dir}: the run trained {steps} steps, but {last.parent} holds no "
                f"checkpoint (deleted or moved?); nothing was changed: put its checkpoints back, or "
                f"continue from one elsewhere with selfsup-train resume={run_dir} ckpt_path=<.ckpt>"
            )
        return  # it stopped before its first checkpoint: it starts again from step 0 (train.resumed_config)
    from selfsup.reliability.checkpoints import load_checkpoint_safely, resume_fingerprint
    from selfsup.reliability.errors import CheckpointCorrupt

    try:
        checkpoint = load_checkpoint_safely(last, mmap=True)
    except CheckpointCorrupt as err:
        others = sorted(
            (p for p in (run_dir / CHECKPOINTS).glob("*.ckpt") if p != last),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
        what = str(err).split("; ")[0]
        if not others:
            raise UserError(
                f"{what}; the run has no other checkpoint: start it again as a new run with the "
                f"same settings in another hydra.run.dir"
            ) from None
        raise UserError(
            f"{what}; continue from another checkpoint of the run: selfsup-train resume={run_dir} ckpt_path={others[0]}"
        ) from None
    step = int(checkpoint.get("global_step", 0))
    finished = RunSummary.read(run_dir).values.get("status") == "finished"
    max_steps = merged.trainer.max_steps
    if finished and step >= max_steps:
        raise UserError(
            f"resume={run_dir}: the run finished at step {step} and trainer.max_steps={max_steps}: "
            f"nothing to continue, the run is unchanged; to train it further raise the limit, e.g. "
            f"selfsup-train resume={run_dir} trainer.max_steps={2 * step}"
        )
    stored = (checkpoint.get("selfsup") or {}).get("config")
    if isinstance(stored, dict):
        plain = OmegaConf.to_container(merged, resolve=True)
        then, now = resume_fingerprint(stored, 0, ""), resume_fingerprint(plain, 0, "")
        changed = [key for key in now if key in then and then[key] != now[key] and not key.startswith("tokenizer.")]
        if changed:
            key = changed[0]
            asked = {override_key(o) for o in overrides}
            if not any(key == k or key.startswith(f"{k}.") for k in asked):  # the checkpoint is another run's
                raise UserError(
                    f"resume={run_dir} ckpt_path={last}: that checkpoint was trained with {key}={then[key]}, the "
                    f"run with {key}={now[key]}: nothing was changed; pass a checkpoint of this run (in "
                    f"{run_dir / 'checkpoints'}), or start a new run from that one with ckpt_path= and without resume="
                )
            raise UserError(
                f"resume={run_dir} cannot change {key} (the run trained with {then[key]}, this "
                f"command asks for {now[key]}): the run is unchanged; drop that override to continue "
                f"it (a run with other settings is a new run, without resume=)"
            )


def resumed_config(run_dir: Path, overrides: list[str], record: Path | None = None) -> DictConfig:
    """`resume=RUN_DIR`: that run's config, with this command's key=value overrides on top (checked by
    RunDirGuard before Hydra wrote anything), from its last checkpoint; a run that stopped before its
    first checkpoint starts again from step 0 in its dir, as a new W&B run. record: where to save the
    config this resume trains with (beside Hydra's record of the command, .hydra/resume-<time>/)."""
    merged = merged_config(run_dir, overrides)
    last = resume_checkpoint(run_dir, overrides)
    merged.resume, merged.ckpt_path = str(run_dir), str(last) if last.is_file() else None
    if not last.is_file():
        log.warning(
            f"{run_dir} has no checkpoint yet (it stopped before its first one): training it from the "
            f"start in the same dir"
        )
        (run_dir / WANDB_RUN_ID).unlink(missing_ok=True)
    if record is not None and record.parent.is_dir():
        OmegaConf.save(merged, record)
    return merged


def requeue_checkpoint(cfg: DictConfig, run_dir: Path) -> Path | None:
    """The hpc_ckpt_<n>.ckpt Lightning saved in this run dir before SLURM requeued the job (same command,
    same run dir), or None."""
    if cfg.resume or cfg.ckpt_path or not os.environ.get("SLURM_JOB_ID"):
        return None
    from selfsup.reliability.checkpoints import slurm_resume_checkpoint

    return slurm_resume_checkpoint(run_dir)


# ---------------------------------------------------------------------------- a job folder of a sweep
def command_swept(sweep_dir: Path) -> list[str] | None:
    """The keys (or config groups, e.g. `objective`) the sweep's command swept, from its multirun.yaml:
    the sweep overrides of the command line and the sweeper's params (an experiment's own sweep); None
    without a readable multirun.yaml, or for a study (its sweeper samples its own params)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        hydra_cfg = OmegaConf.load(Path(sweep_dir) / MULTIRUN).hydra
        task = list(hydra_cfg.overrides.task)
        params = dict(hydra_cfg.sweeper.get("params") or {})
        sweeper = str(hydra_cfg.sweeper.get("_target_", ""))
    except (OSError, ValueError, AttributeError, OmegaConfBaseException):
        return None
    if "optuna" in sweeper:
        params = {}  # sampled, not swept (the study section has them); the command line's sweeps still count
    try:
        overrides = OverridesParser.create().parse_overrides([*task, *(f"{k}={v}" for k, v in params.items())])
    except HydraException:
        return None
    return list(dict.fromkeys(o.key_or_group for o in overrides if o.is_sweep_override()))


def sweep_of(run_dir: Path) -> Path | None:
    """The sweep dir whose job folder `run_dir` is (its parent holds Hydra's multirun.yaml), else None."""
    parent = Path(run_dir).resolve().parent
    return parent if (parent / MULTIRUN).is_file() else None


def sweep_group(sweep_dir: Path, choices) -> str:
    """A sweep's W&B group: `<sweep or experiment name>-<date>-<time>` (the sweep dir's last two parts)."""
    label = choices.get("sweeps") or choices.get("experiment") or "sweep"
    return f"{label}-{sweep_dir.parent.name}-{sweep_dir.name}"


def join_sweep(run_dir: Path) -> Path | None:
    """A single run into a job folder of a sweep (a job a stopped sweep did not run): the sweep's swept keys for
    its W&B name, tags and summary (SELFSUP_SWEPT, as the sweep sets it for its jobs). The sweep dir, or None."""
    sweep = sweep_of(run_dir)
    if sweep is not None and "SELFSUP_SWEPT" not in os.environ:
        os.environ["SELFSUP_SWEPT"] = ",".join(sorted(command_swept(sweep) or []))
    return sweep
