"""Callbacks for long runs: last.ckpt every N steps, non-finite losses, preemption signals."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from selfsup.common.names import CHECKPOINTS, LAST_CKPT
from selfsup.common.upstream import cluster_environment
from selfsup.reliability import stop
from selfsup.reliability.errors import NonFiniteLossError

log = logging.getLogger("selfsup")

# ============================================================================ non-finite losses


def _last_checkpoint(trainer) -> str:
    cb = getattr(trainer, "checkpoint_callback", None)
    last = next((c for c in trainer.callbacks if isinstance(c, LastCheckpoint) and c.saved), None)
    for candidate in (
        str(last.path) if last else "",
        getattr(cb, "last_model_path", ""),
        getattr(cb, "best_model_path", ""),
    ):
        if candidate and os.path.isfile(candidate):
            return candidate
    folder = getattr(cb, "dirpath", None) or os.path.join(trainer.default_root_dir, CHECKPOINTS)
    try:
        ckpts = sorted(Path(folder).glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    except OSError:
        ckpts = []
    return str(ckpts[-1]) if ckpts else f"none yet (checkpoints go to {folder})"


class LastCheckpoint(Checkpoint):
    """``last.ckpt`` every N training steps and at the last step, through the Trainer's
    checkpoint IO (atomic). Lightning's ``save_last`` only rewrites it when a new best checkpoint
    is saved, so a run whose validation loss rose would resume from an old step.

    A Checkpoint callback, so Lightning runs it after the ModelCheckpoint listed before it: when a
    validation that follows a saved step finds a new best, last.ckpt is written again after it (else
    a resumed run would compare against a stale best and leave the newer best file behind). A step
    the PreemptionHandler saved is not saved again."""

    def __init__(self, path, every_n_steps: int):
        self.path, self.every_n_steps = Path(path), max(1, int(every_n_steps))
        self.saved = None  # (global step, best checkpoint path) of the last save

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        # the last step is saved at its batch end too, not at train end: a train-end checkpoint marks
        # the epoch as over, and a resume from it would start a new epoch's data order
        step = trainer.global_step
        last = trainer.max_steps is not None and 0 < trainer.max_steps <= step
        if step and (step % self.every_n_steps == 0 or last or trainer.should_stop) and not _preempted(trainer):
            self._save(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        if (
            not trainer.sanity_checking
            and self.saved
            and self.saved[0] == trainer.global_step
            and self.saved[1] != _best(trainer)
            and not _preempted(trainer)
        ):
            self._save(trainer)

    def _save(self, trainer) -> None:
        finite = finite_weights(trainer.lightning_module)
        if trainer.world_size > 1:  # a sharded model: every rank checked its shards; the save is collective
            finite = bool(trainer.strategy.reduce_boolean_decision(finite, all=True))
        if not finite:  # never a "last good" checkpoint with NaN weights
            log.warning(
                f"step {trainer.global_step}: the weights are not finite; {self.path} keeps the last finite ones"
            )
            return
        trainer.save_checkpoint(self.path, weights_only=False)
        self.saved = (trainer.global_step, _best(trainer))


def finite_weights(module) -> bool:
    """Every parameter of the module is finite (FSDP: this rank's shards)."""
    params = [p.detach().to_local() if hasattr(p, "to_local") else p.detach() for p in module.parameters()]
    return not params or bool(torch.stack([torch.isfinite(p).all() for p in params]).all())


def _best(trainer) -> str:
    return getattr(trainer.checkpoint_callback, "best_model_path", "")


def _preempted(trainer) -> bool:
    """A PreemptionHandler has saved and is stopping the run (it runs before LastCheckpoint)."""
    return any(getattr(cb, "preempted", None) for cb in trainer.callbacks if isinstance(cb, PreemptionHandler))


class NonFiniteGuard(Callback):
    """Stops or skips optimizer steps whose loss is nan/inf.

    The module calls ``guard.check(loss, trainer)`` after backward and before ``optimizer.step()``;
    True means: skip this step (zero the grads, step neither optimizer nor scheduler).

    policy "stop": raise NonFiniteLossError at the first non-finite loss.
    policy "skip": skip up to ``max_skips`` non-finite losses in a row; the next one raises. A finite
    step resets the count. The count is saved in checkpoints (callback state).

    Raising happens before the optimizer step, so the weights in memory and in every checkpoint are
    the last good ones; Lightning does not checkpoint on exceptions (ModelCheckpoint's
    save_on_exception is False by default, and on_train_end, where save_last writes, runs only
    when training ends normally).
    """

    def __init__(
        self,
        policy: str = "stop",
        max_skips: int = 10,
        *,
        policy_setting: str = "trainer.nonfinite",
        lr_setting: str = "optim.lr",
        resume_hint: str | None = None,
        restart_hint: str | None = None,
    ):
        if policy not in ("stop", "skip"):
            raise ValueError(f"{policy_setting} must be stop or skip, not {policy!r}")
        if max_skips < 0:
            raise ValueError(f"max_skips must be >= 0, not {max_skips}")
        self.policy, self.max_skips = policy, int(max_skips)
        self.policy_setting, self.lr_setting = policy_setting, lr_setting
        self.resume_hint = resume_hint  # a command that continues from the last checkpoint with a lower lr
        self.restart_hint = restart_hint  # one that starts the run again with a lower lr (a new run dir)
        self.consecutive = 0  # non-finite losses in a row, up to now
        self.skipped = 0  # steps skipped in this run, in total

    @staticmethod
    def find(trainer) -> NonFiniteGuard | None:
        """The guard among the trainer's callbacks (for the module's on_fit_start), or None."""
        return next((cb for cb in trainer.callbacks if isinstance(cb, NonFiniteGuard)), None)

    def check(self, values: torch.Tensor, trainer, names: Sequence[str] = ("loss", "gradient norm")) -> bool:
        """True: skip this optimizer step. Raises NonFiniteLossError when the policy says stop.

        ``values``: the loss, or the loss and the gradient norm (``names`` says which is which); any
        non-finite one counts. Pass values reduced over devices, or every rank must see the same
        verdict: with several devices the verdict is reduced (any rank non-finite -> all skip or stop).
        """
        values = values.detach().float().reshape(-1)
        bad = not bool(torch.isfinite(values).all())
        if getattr(trainer, "world_size", 1) > 1:
            bad = bool(trainer.strategy.reduce_boolean_decision(bad, all=False))
        if not bad:
            self.consecutive = 0
            return False
        self.consecutive += 1
        finite = torch.isfinite(values)
        if (~finite).any():
            first = int((~finite).nonzero()[0])
            what = f"the {names[first] if first < len(names) else 'loss'} became {values[first].item()}"
        else:
            what = "a loss or gradient became non-finite on another device"
        step = trainer.global_step
        checkpoint = _last_checkpoint(trainer)
        val = trainer.callback_metrics.get("val/loss")
        diverged = val is not None and not bool(torch.isfinite(torch.as_tensor(val)))
        if diverged and self.restart_hint:  # the checkpoint's weights are finite but already give NaN
            then = (
                f"its weights already give a validation loss of {float(val)}: start again with a lower learning "
                f"rate: {self.restart_hint}"
            )
        elif self.resume_hint:
            then = (
                f"{'start again' if checkpoint.startswith('none yet') else 'continue from it'} with a lower "
                f"learning rate: {self.resume_hint}"
            )
        else:
            then = f"lower {self.lr_setting}"
        if self.policy == "stop":
            raise NonFiniteLossError(
                f"{what} at step {step} (the weights were not updated); the last checkpoint is "
                f"{checkpoint}; {then}, or skip such steps with {self.policy_setting}=skip"
            )
        if self.consecutive > self.max_skips:
            raise NonFiniteLossError(
                f"{what} at step {step}, {self.consecutive} times in a row, more than the {self.max_skips} skips "
                f"allowed; the last checkpoint is {checkpoint}; {then}"
            )
        self.skipped += 1
        log.warning(f"{what} at step {step}: step skipped ({self.consecutive} in a row, at most {self.max_skips})")
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"consecutive": self.consecutive, "skipped": self.skipped}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.consecutive = int(state_dict.get("consecutive", 0))
        self.skipped = int(state_dict.get("skipped", 0))


# ============================================================================ preemption


class PreemptionHandler(Callback):
    """SIGTERM / SIGUSR1: save ``last.ckpt`` at the next batch end, then stop cleanly.

    From ``on_train_start`` (after Lightning registered its own handlers) until training ends,
    the signals set a flag; at the next ``on_train_batch_end`` every rank agrees on it, the
    checkpoint is written with ``trainer.save_checkpoint`` (through the Trainer's checkpoint IO:
    atomic with AtomicCheckpointIO) and ``trainer.should_stop`` is set. ``fit`` then returns
    normally, without the validation Lightning would run before stopping: ``self.preempted`` holds the
    signal's name and ``self.checkpoint_path`` the file. The lab records the run as "preempted" and exits 0.
    A signal during a validation ends the evaluation under way at its next boundary (the signal is noted in
    selfsup.reliability.stop, which the evaluation reads); the checkpoint follows at the next step, or, in
    the final validation, as training ends (``on_train_end``).

    Lightning on its own turns SIGTERM into SIGTERMException (a SystemExit) with no checkpoint;
    this handler replaces that during training and puts Lightning's handler back afterwards.
    A second signal before the checkpoint is written hands over to the previous handler at once (the
    default one: Lightning's SIGTERMException, so the run ends through its own exit path, "interrupted").

    Under SLURM with auto-requeue (Lightning's SLURMEnvironment, on by default in SLURM batch
    jobs), Lightning owns the requeue signal (SIGUSR1: it saves hpc_ckpt_<n>.ckpt in
    default_root_dir and runs ``scontrol requeue``); this handler leaves that signal alone and
    handles SIGTERM only.
    """

    def __init__(
        self,
        dirpath=None,
        filename: str = LAST_CKPT,
        signals: Sequence[int] = (signal.SIGTERM, signal.SIGUSR1),
        resume_hint: str | None = None,
    ):
        self.dirpath, self.filename, self.signals = dirpath, filename, tuple(signals)
        self.resume_hint = resume_hint  # the command that continues the run
        self.preempted: str | None = None  # name of the signal that stopped training
        self.checkpoint_path: str | None = None  # the checkpoint written for it
        self._received: int | None = None
        self._previous: dict[int, Any] = {}

    # --------------------------------------------------------------- signals
    def _handled_signals(self, environment) -> list[int]:
        """Our signals, less the one Lightning requeues on when the environment is SLURM with auto-requeue."""
        handled = list(self.signals)
        if isinstance(environment, SLURMEnvironment) and environment.auto_requeue:
            handled = [s for s in handled if s != environment.requeue_signal]
        return handled

    def _install(self, signals: Sequence[int]) -> None:
        if threading.current_thread() is not threading.main_thread():
            log.warning("preemption handling is off: signals can only be handled in the main thread")
            return
        for signum in signals:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._on_signal)

    def _restore(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def _on_signal(self, signum: int, frame) -> None:
        if self._received is None:
            self._received = signum
            log.warning(
                f"received {stop.note(signum)}: saving a checkpoint at the end of this step (or of the "
                f"evaluation under way), then stopping (send it again to stop at once)"
            )
            return
        previous = self._previous.get(signum, signal.SIG_DFL)
        self._restore()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:  # stop now, through the run's own exit path (status "interrupted")
            raise SIGTERMException(128 + signum)

    # --------------------------------------------------------------- hooks
    def on_train_start(self, trainer, pl_module) -> None:
        self.preempted, self.checkpoint_path, self._received = None, None, None
        self._install(self._handled_signals(cluster_environment(trainer)))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._save_if_signalled(trainer):
            trainer.should_stop = True
            trainer.limit_val_batches = 0  # no validation before stopping (Lightning runs one on should_stop)

    def _save_if_signalled(self, trainer) -> bool:
        """On every rank: when any rank received a signal and no checkpoint was saved for it yet, save it now."""
        if self.preempted is not None:
            return False
        flag = self._received is not None
        if trainer.world_size > 1:
            flag = bool(trainer.strategy.reduce_boolean_decision(flag, all=False))
        if not flag:
            return False
        folder = (
            self.dirpath
            or getattr(trainer.checkpoint_callback, "dirpath", None)
            or os.path.join(trainer.default_root_dir, CHECKPOINTS)
        )
        path = os.path.join(str(folder), self.filename)
        trainer.save_checkpoint(path, weights_only=False)
        self.preempted = signal.Signals(self._received).name if self._received is not None else "signal"
        self.checkpoint_path = path
        log.warning(
            f"{self.preempted}: saved {path} at step {trainer.global_step}; stopping. "
            f"Continue with: {self.resume_hint or f'selfsup-train ckpt_path={path}'}"
        )
        return True

    def on_train_end(self, trainer, pl_module) -> None:
        self._save_if_signalled(trainer)  # a signal in the final validation: its evaluation stopped early
        self._restore()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self._restore()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self._restore()
