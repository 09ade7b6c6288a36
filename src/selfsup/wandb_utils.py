"""W&B settings shared by selfsup-train and selfsup-report, and the W&B logger of selfsup-train.

The settings need the standard library only; ``SafeWandbLogger`` imports Lightning (seconds), so it
is built when first asked for.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from urllib.parse import urlparse

log = logging.getLogger("selfsup")


def api_key_configured() -> bool:
    """A W&B API key is set: WANDB_API_KEY, or a netrc entry for the W&B host (WANDB_BASE_URL, default api.wandb.ai)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return netrc.is_file() and host in netrc.read_text(errors="ignore")


def wandb_mode(requested: str) -> str:
    """auto: offline unless the user configured W&B (WANDB_MODE, or an API key); never a prompt."""
    if requested != "auto":
        return requested
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if api_key_configured() else "offline"


def __getattr__(name: str):
    if name == "SafeWandbLogger":
        globals()[name] = _safe_wandb_logger()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _safe_wandb_logger() -> type:
    from lightning.pytorch.loggers import WandbLogger
    from lightning.pytorch.loggers.logger import DummyExperiment

    class SafeWandbLogger(WandbLogger):
        """A WandbLogger whose failures never stop training.

        The first exception from W&B (its service process died, say: every call then raises
        ConnectionResetError) prints one warning with the `wandb sync` command for what was written,
        lets go of the W&B service, and from then on this logger does nothing: ``experiment`` is
        Lightning's no-op DummyExperiment. Start the run with ``experiment`` first to tell a run
        that cannot start (the lab does). ``csv_dir``: where the metrics go on, for the warning.
        """

        def __init__(self, *args, csv_dir: str | None = None, **kwargs):
            super().__init__(*args, **kwargs)
            self._wandb_init.pop("anonymous", None)  # Lightning passes it; wandb warns it has no effect
            self.csv_dir, self.stopped, self.last_step = csv_dir, None, 0

        @property
        def experiment(self):
            return DummyExperiment() if self.stopped else super().experiment

        def run_folder(self) -> str | None:
            """The run's local folder (what `wandb sync` uploads); None before the run started."""
            if self._experiment is None:
                return None
            with contextlib.suppress(Exception):
                return str(Path(self._experiment.dir).parent)
            return str(Path(self.save_dir or ".") / "wandb")

        def _guard(self, call, *args) -> None:
            if self.stopped:
                return
            try:
                call(*args)
            except Exception as err:  # noqa: BLE001 - whatever W&B raises, training goes on
                self._stop(err)

        def _stop(self, err: Exception) -> None:
            reason = f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
            if isinstance(err, ConnectionError):
                reason = f"its service process is gone ({reason})"
            self.stopped = reason
            goes_on = f"metrics go to the CSV log in {self.csv_dir}" if self.csv_dir else "metrics are not recorded"
            folder = self.run_folder()
            sync = f"sync what was written with `wandb sync {folder}`" if folder else "W&B wrote nothing"
            log.warning(f"W&B stopped at step {self.last_step}: {reason}; training goes on, {goes_on}; {sync}")
            import wandb
            with contextlib.suppress(Exception):  # forgets the dead service and its exit hook (else a
                wandb.teardown()                  # traceback at exit); raises ConnectionResetError itself
            with contextlib.suppress(Exception):  # the next run in this process (a sweep) starts afresh
                if wandb.run is self._experiment:
                    from wandb.sdk.lib import module
                    module.unset_globals()

        def log_hyperparams(self, params) -> None:
            self._guard(super().log_hyperparams, params)

        def log_metrics(self, metrics, step: int | None = None) -> None:
            self.last_step = self.last_step if step is None else step
            self._guard(super().log_metrics, metrics, step)

        def after_save_checkpoint(self, checkpoint_callback) -> None:
            self._guard(super().after_save_checkpoint, checkpoint_callback)

        def finalize(self, status: str) -> None:
            self._guard(super().finalize, status)

        def finish(self, exit_code: int) -> str | None:
            """Finish the W&B run (never raises); its local folder, or None when it never started."""
            folder = self.run_folder()
            if folder is not None:
                self._guard(lambda: self._experiment.finish(exit_code=exit_code))
            return folder

    SafeWandbLogger.__module__ = __name__
    return SafeWandbLogger
