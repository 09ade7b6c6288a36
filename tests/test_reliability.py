"""Reliability: atomic checkpoints, safe loading, resume checks, non-finite losses, preemption, redaction.

Real Lightning runs of a tiny SelfSupModule, real files, real signals; each run takes about a second.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from omegaconf import OmegaConf

from selfsup.common.memory import rss_mb
from selfsup.data.vocab import Vocab
from selfsup.models import build_model
from selfsup.objectives import MaskedLM
from selfsup.optim import AdamWCosine
from selfsup.reliability import checkpoint_io as reliability  # its private _open_new is patched
from selfsup.reliability import checkpoints
from selfsup.reliability.callbacks import NonFiniteGuard, PreemptionHandler
from selfsup.reliability.checkpoint_io import AtomicCheckpointIO
from selfsup.reliability.checkpoints import (
    CheckpointCorrupt,
    CheckpointDiskFull,
    CheckpointError,
    CheckpointNotFound,
    CheckpointWriteError,
    NonFiniteLossError,
    ResumeMismatch,
    UnsafeCheckpoint,
    check_resume_compatible,
    load_checkpoint_safely,
    resume_fingerprint,
    resume_state,
)
from selfsup.reliability.redact import redact
from selfsup.training.module import SelfSupModule

V = Vocab(size=300, n_sentinels=10)
SRC = Path(__file__).resolve().parents[1] / "src"


def lab_config(objective: str = "clm", **changes) -> dict:
    """A resolved train config as the lab composes it (conf/, objective=<objective>), with changes."""
    from hydra import compose, initialize_config_dir

    from selfsup.run.cli import CONF_DIR
    from selfsup.run.schema import register

    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose("train", overrides=[f"objective={objective}"])
    for key, value in changes.items():
        OmegaConf.update(cfg, key, value)
    return OmegaConf.to_container(cfg, resolve=True)


CFG = lab_config()


class LabModule(SelfSupModule):
    """The lab's SelfSupModule, with a NaN injected into the loss of chosen batches."""

    def __init__(self, *args, poison=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.poison = set(poison)  # batch indices whose loss is made nan
        self.resume_record = resume_state(CFG, V.size, "tokenizer-sha")

    def training_step(self, tokens, batch_idx):
        clean = self.model
        if batch_idx in self.poison:  # an injected nan: every logit of this batch (same parameters)
            self.model = Poisoned(clean)
        try:
            return super().training_step(tokens, batch_idx)
        finally:
            self.model = clean


class Poisoned(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.inner, self.lm_head, self.vocab_size = model, model.lm_head, model.vocab_size  # the fused head's

    def forward(self, **kwargs):
        return self.inner(**kwargs) * float("nan")

    def head(self, hidden):
        return self.inner.head(hidden)


def tiny_module(max_steps=100, poison=()) -> LabModule:
    torch.manual_seed(0)
    model = build_model("encoder", V.size, 32, d_model=32, n_layers=1, n_heads=2)
    return LabModule(model, MaskedLM(V, 32), AdamWCosine(warmup_steps=2), max_steps=max_steps, poison=poison)


def loader(n_batches=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(V.first_ordinary, V.size, (8 * n_batches, 32), generator=g)
    return torch.utils.data.DataLoader(data, batch_size=8)


def trainer(tmp_path, callbacks=(), max_steps=4, **kwargs) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(tmp_path),
        plugins=[AtomicCheckpointIO()],
        callbacks=list(callbacks),
        **kwargs,
    )


def lab_checkpoint_callback(tmp_path, **kwargs) -> ModelCheckpoint:
    """As train.py builds it."""
    options = {
        "filename": "step{step:06d}",
        "auto_insert_metric_name": False,
        "monitor": "val/loss",
        "mode": "min",
        "save_top_k": 1,
        "save_last": True,
    }
    options.update(kwargs)
    return ModelCheckpoint(dirpath=tmp_path / "checkpoints", **options)


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    return text


# ============================================================================ a real checkpoint


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """A real 4-step fit with the lab's checkpoint callback, throughput monitor and our callbacks."""
    from selfsup.training.throughput import TokenThroughput

    tmp_path = tmp_path_factory.mktemp("real")
    throughput = TokenThroughput(window_size=2)
    throughput.available_flops = 1e11  # skips measuring this CPU's peak (seconds); it keeps no checkpoint state
    callbacks = [lab_checkpoint_callback(tmp_path), throughput, NonFiniteGuard("skip", 3), PreemptionHandler()]
    t = trainer(
        tmp_path, callbacks, max_steps=4, val_check_interval=2, check_val_every_n_epoch=None, limit_val_batches=2
    )
    t.fit(tiny_module(), loader(), loader(2, seed=1))
    return tmp_path / "checkpoints"


def test_real_checkpoint_loads_weights_only_and_needs_no_extra_globals(real_run):
    names = sorted(p.name for p in real_run.iterdir())
    assert names[0] == "last.ckpt" and len(names) == 2 and names[1].startswith("step")  # no temp files left
    # every global the pickle names is in torch's own weights_only allowlist: nothing extra allowed
    assert checkpoints.SAFE_GLOBALS == ()
    assert torch.serialization.get_unsafe_globals_in_checkpoint(str(real_run / "last.ckpt")) == []
    ckpt = AtomicCheckpointIO().load_checkpoint(real_run / "last.ckpt")
    # Lightning 2.6 rewrites last.ckpt only when a top-k checkpoint is saved: it is the best step here
    assert ckpt["global_step"] == int(names[1].removeprefix("step").removesuffix(".ckpt")) > 0
    assert ckpt["selfsup"]["tokenizer_hash"] == "tokenizer-sha"
    assert "NonFiniteGuard" in ckpt["callbacks"]
    assert ckpt["callbacks"]["NonFiniteGuard"] == {"consecutive": 0, "skipped": 0}


def test_resume_through_the_atomic_io_continues_the_run(real_run, tmp_path):
    module = tiny_module()
    t = trainer(tmp_path, [NonFiniteGuard("skip", 3)], max_steps=6)
    t.fit(module, loader(), ckpt_path=str(real_run / "last.ckpt"))
    assert t.global_step == 6
    assert all(torch.isfinite(p).all() for p in module.parameters())


def test_truncated_checkpoint_is_refused_in_one_line(real_run, tmp_path):
    data = (real_run / "last.ckpt").read_bytes()
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / "step000002.ckpt").write_bytes(data)
    bad = folder / "last.ckpt"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointCorrupt) as info:
        load_checkpoint_safely(bad)
    message = one_line(info.value)
    assert message.startswith(f"{bad} is truncated or not a checkpoint: ")
    assert f"use another checkpoint, newest first: {folder / 'step000002.ckpt'}" in message
    # Lightning's own resume goes through the IO and stops with the same error
    with pytest.raises(CheckpointCorrupt, match="is truncated or not a checkpoint"):
        trainer(tmp_path, max_steps=6).fit(tiny_module(), loader(), ckpt_path=str(bad))
    # an empty file, and a file of another kind
    bad.write_bytes(b"")
    with pytest.raises(CheckpointCorrupt, match="the file is empty"):
        load_checkpoint_safely(bad)
    bad.write_text("step,loss\n1,5.0\n")
    with pytest.raises(CheckpointCorrupt, match="not a complete PyTorch zip archive"):
        load_checkpoint_safely(bad)
    with pytest.raises(CheckpointNotFound, match="does not exist"):
        load_checkpoint_safely(folder / "missing.ckpt")
    assert issubclass(CheckpointNotFound, FileNotFoundError)


class Exploit:
    """Unpickling this runs a shell command."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_checkpoint_with_code_in_its_pickle_is_refused(tmp_path):
    marker = tmp_path / "exploited"
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {"w": torch.ones(2)}, "global_step": 3, "extra": Exploit(marker)}, path)
    with pytest.raises(UnsafeCheckpoint) as info:
        AtomicCheckpointIO().load_checkpoint(path)
    assert "posix.system" in one_line(info.value) or "os.system" in str(info.value)
    assert not marker.exists()
    torch.load(path, weights_only=False)  # the payload is real: a plain load runs it
    assert marker.exists()


# ============================================================================ atomic writes


class WrappedFile:
    """A real file opened for writing; subclasses change what `write` does, the rest goes to the file."""

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


class FailingFile(WrappedFile):
    """A real file whose writes fail with `error` after `after` bytes (a disk filling up)."""

    def __init__(self, path, error, after=4096):
        self.f, self.error, self.after, self.written = open(path, "xb"), error, after, 0  # noqa: SIM115
        self.path = path

    def write(self, data):
        if self.written + len(data) > self.after:
            raise self.error
        self.written += len(data)
        return self.f.write(data)


@pytest.mark.parametrize(
    "error,kind,words",
    [
        (OSError(errno.ENOSPC, "No space left on device"), CheckpointDiskFull, "the disk is full"),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), CheckpointDiskFull, "the disk is full"),
        (PermissionError(errno.EACCES, "Permission denied"), CheckpointWriteError, "Permission denied"),
    ],
)
def test_failed_write_keeps_the_old_checkpoint_and_leaves_no_temp_file(tmp_path, monkeypatch, error, kind, words):
    io = AtomicCheckpointIO(resume_hint=f"selfsup-train resume={tmp_path}")
    target = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"global_step": 1, "w": torch.ones(10)}, target)
    opened = []

    def failing_open(path):
        opened.append(FailingFile(path, error))
        return opened[-1]

    monkeypatch.setattr(reliability, "_open_new", failing_open)
    with pytest.raises(kind) as info:
        io.save_checkpoint({"global_step": 2, "w": torch.zeros(100_000)}, target)
    message = one_line(info.value)
    assert opened and opened[0].written > 0  # the failure came in the middle of the write
    assert message.startswith(f"cannot write checkpoint {target}: ")
    assert words in message and "earlier checkpoints are intact" in message
    assert message.endswith(f"then continue: selfsup-train resume={tmp_path}")  # (the full-disk test runs it)
    assert os.listdir(target.parent) == ["last.ckpt"]  # temp file removed
    old = load_checkpoint_safely(target)
    assert old["global_step"] == 1 and torch.equal(old["w"], torch.ones(10))


def test_real_disk_full_from_the_kernel_is_recognised(tmp_path, monkeypatch):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    monkeypatch.setattr(reliability, "_open_new", lambda path: open("/dev/full", "wb"))  # noqa: SIM115
    with pytest.raises(CheckpointDiskFull, match="the disk is full"):  # torch wraps it in a RuntimeError
        AtomicCheckpointIO().save_checkpoint({"w": torch.zeros(100_000)}, tmp_path / "last.ckpt")


def test_failure_at_fsync_removes_the_temp_file(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    target = tmp_path / "last.ckpt"
    io.save_checkpoint({"v": 1}, target)

    def fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(CheckpointDiskFull):
        io.save_checkpoint({"v": 2}, target)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["last.ckpt"]
    assert load_checkpoint_safely(target) == {"v": 1}


class Stalling(WrappedFile):
    """A real file that, once half of the checkpoint is on disk, says so and waits to be killed."""

    def __init__(self, path, marker):
        self.f, self.n, self.marker = open(path, "xb"), 0, marker  # noqa: SIM115

    def write(self, data):
        self.n += self.f.write(data)
        if self.n > 100_000:
            self.f.flush()
            self.marker.touch()
            time.sleep(600)
        return len(data)


def test_kill_mid_write_leaves_the_previous_checkpoint(tmp_path):
    io, target, marker = AtomicCheckpointIO(), tmp_path / "last.ckpt", tmp_path / "half-written"
    io.save_checkpoint({"version": 1, "w": torch.ones(1000)}, target)
    newer = {"version": 2, "w": torch.zeros(1_000_000)}  # made here: no torch kernels run in the child
    pid = os.fork()  # a child that already has torch and Lightning loaded: no interpreter start-up
    if pid == 0:
        try:
            reliability._open_new = lambda path: Stalling(path, marker)
            io.save_checkpoint(newer, target)
        finally:
            os._exit(1)
    try:
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            assert os.waitpid(pid, os.WNOHANG) == (0, 0), "the writer ended early"
            time.sleep(0.02)
    finally:
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    assert marker.exists() and os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    leftovers = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(leftovers) == 1 and leftovers[0].name.startswith(".last.ckpt.")  # hidden, never a .ckpt
    assert leftovers[0].stat().st_size > 100_000
    assert load_checkpoint_safely(target)["version"] == 1


# ============================================================================ resume compatibility


def test_fingerprint_holds_what_defines_the_run_and_not_what_users_change_to_train_longer():
    fp = resume_fingerprint(lab_config("mlm"), 4000, "abc")
    for key in (
        "objective.name",
        "objective.mask_rate",
        "architecture.name",
        "architecture.d_model",
        "architecture.dropout",
        "data.seq_len",
        "data.vocab_size",
        "data.n_sentinels",
        "data.source",
        "data.paths",
        "data.val_fraction",
        "seed",
        "tokenizer.vocab_size",
        "tokenizer.hash",
    ):
        assert key in fp, key
    assert not any(k.startswith(("trainer.", "logger.")) for k in fp)
    assert "data.batch_size" not in fp and "architecture.activation_checkpointing" not in fp
    assert json.loads(json.dumps(fp)) == fp  # plain data


@pytest.fixture
def recorded(tmp_path):
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint(
        {
            "state_dict": {"w": torch.ones(3)},
            "global_step": 7,
            "selfsup": {"tokens_seen": 10, **resume_state(CFG, 4000, "abc")},
        },
        path,
    )
    return path


def test_resume_with_the_same_run_settings_is_allowed(recorded):
    check_resume_compatible(recorded, CFG, 4000, "abc")
    longer = lab_config(
        **{
            "trainer.max_steps": 5000,
            "optim.lr": 1e-4,
            "optim.warmup_steps": 7,
            "data.batch_size": 64,
            "architecture.activation_checkpointing": True,
            "logger.project": "other",
        }
    )
    check_resume_compatible(recorded, longer, 4000, "abc")


def test_resume_mismatch_names_each_key_with_both_values(recorded):
    now = lab_config(**{"objective.name": "mlm", "data.vocab_size": 8192})
    with pytest.raises(ResumeMismatch) as info:
        check_resume_compatible(recorded, now, 4000, "abc")
    message = one_line(info.value)
    assert message.startswith(f"cannot resume from {recorded}: ")
    assert "objective.name is clm in the checkpoint but mlm now" in message
    assert "data.vocab_size is 4096 in the checkpoint but 8192 now" in message
    assert message.count(" in the checkpoint but ") == 2
    assert isinstance(info.value, CheckpointError)

    with pytest.raises(
        ResumeMismatch,
        match=r"seed is 0 in the checkpoint but 1 now; "
        r"tokenizer.vocab_size is 4000 in the checkpoint but 4100 now; "
        r"tokenizer.hash is abc in the checkpoint but def now",
    ):
        check_resume_compatible(recorded, lab_config(seed=1), 4100, "def")


def test_the_tokenizer_and_split_settings_are_part_of_what_a_resume_keeps(recorded):
    now = lab_config(**{"data.tokenizer": "t5/tokenizer.json", "data.tokenizer_sample_chars": 1000})
    with pytest.raises(ResumeMismatch) as info:
        check_resume_compatible(recorded, now, 4000, "abc")
    message = one_line(info.value)
    assert "data.tokenizer is None in the checkpoint but t5/tokenizer.json now" in message
    assert "data.tokenizer_sample_chars is 100000000 in the checkpoint but 1000 now" in message
    old = {**CFG, "data": {k: v for k, v in CFG["data"].items() if k not in ("tokenizer", "val_split")}}
    path = recorded.with_name("older.ckpt")  # a checkpoint from before these settings existed: not compared
    AtomicCheckpointIO().save_checkpoint({"state_dict": {}, "selfsup": resume_state(old, 4000, "abc")}, path)
    check_resume_compatible(path, CFG, 4000, "abc")


def test_resuming_a_run_whose_data_changed_names_the_resume_once_the_data_is_back(recorded):
    with pytest.raises(ResumeMismatch) as info:
        check_resume_compatible(recorded, CFG, 4000, "other-tokenizer", resume="outputs/run")
    assert one_line(info.value).endswith(
        "tokenizer.hash is abc in the checkpoint but other-tokenizer now: the run's "
        "data changed since it was trained; put back the data it was trained on, "
        "then continue: selfsup-train resume=outputs/run"
    )


def test_checkpoint_without_a_record_warns_and_is_allowed(tmp_path):
    path = tmp_path / "old.ckpt"
    AtomicCheckpointIO().save_checkpoint({"state_dict": {}, "selfsup": {"tokens_seen": 1}}, path)
    with pytest.warns(UserWarning, match="cannot check"):
        check_resume_compatible(path, CFG, 4000, "abc")


def test_resume_check_on_a_real_checkpoint(real_run):
    check_resume_compatible(real_run / "last.ckpt", CFG, V.size, "tokenizer-sha")
    with pytest.raises(
        ResumeMismatch, match=f"architecture.n_layers is {CFG['architecture']['n_layers']} in the checkpoint but 8 now"
    ):
        check_resume_compatible(
            real_run / "last.ckpt", lab_config(**{"architecture.n_layers": 8}), V.size, "tokenizer-sha"
        )


# ============================================================================ non-finite losses


def fresh_trainer(tmp_path):
    """A real Trainer before any step (global_step 0), without a checkpoint callback."""
    return L.Trainer(
        default_root_dir=str(tmp_path),
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def test_guard_skip_counts_consecutive_non_finite_losses(tmp_path):
    guard, t = NonFiniteGuard("skip", max_skips=2), fresh_trainer(tmp_path)
    nan, inf = torch.tensor(float("nan")), torch.tensor(float("inf"))
    assert guard.check(torch.tensor(2.0), t) is False
    assert guard.check(nan, t) is True and guard.check(inf, t) is True
    assert guard.check(torch.tensor(1.5), t) is False and guard.consecutive == 0  # a good step resets
    assert guard.check(nan, t) and guard.check(nan, t)
    state = guard.state_dict()
    assert state == {"consecutive": 2, "skipped": 4}
    resumed = NonFiniteGuard("skip", max_skips=2)
    resumed.load_state_dict(state)
    with pytest.raises(
        NonFiniteLossError,
        match=r"the loss became nan at step 0, 3 times in a row, more than the "
        r"2 skips allowed",
    ):
        resumed.check(nan, t)
    # several values at once (loss, grad norm): any non-finite one counts, and is named
    assert NonFiniteGuard("skip", 1).check(torch.tensor([1.0, float("inf")]), t) is True
    with pytest.raises(NonFiniteLossError, match=r"^the gradient norm became inf at step 0 \(the weights were not"):
        NonFiniteGuard("stop").check(torch.tensor([1.0, float("inf")]), t)


def test_guard_stop_raises_at_the_first_non_finite_loss(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"x")
    guard = NonFiniteGuard("stop")
    assert guard.check(torch.tensor(3.0), fresh_trainer(tmp_path)) is False
    with pytest.raises(NonFiniteLossError) as info:
        guard.check(torch.tensor(float("-inf")), fresh_trainer(tmp_path))
    assert one_line(info.value) == (
        f"the loss became -inf at step 0 (the weights were not updated); the last "
        f"checkpoint is {tmp_path / 'checkpoints' / 'last.ckpt'}; lower optim.lr, or "
        f"skip such steps with trainer.nonfinite=skip"
    )
    with pytest.raises(ValueError, match="stop or skip"):
        NonFiniteGuard("ignore")


def every_step_checkpoints(tmp_path):
    return ModelCheckpoint(
        dirpath=tmp_path / "checkpoints",
        filename="step{step}",
        auto_insert_metric_name=False,
        every_n_train_steps=1,
        save_top_k=-1,
        save_last=True,
    )


def steps_saved(folder: Path) -> dict:
    return {p.name: load_checkpoint_safely(p)["global_step"] for p in sorted(folder.glob("*.ckpt"))}


@pytest.mark.filterwarnings("ignore:Using ModelCheckpoint with manual optimization")
def test_skip_policy_in_a_real_run_skips_and_keeps_weights_finite(tmp_path):
    guard, module = NonFiniteGuard("skip", max_skips=2), tiny_module(poison={3, 4})
    t = trainer(tmp_path, [guard, every_step_checkpoints(tmp_path)], max_steps=100, max_epochs=1)
    t.fit(module, loader(8))
    assert t.global_step == 6  # 8 batches, 2 skipped
    assert guard.skipped == 2 and guard.consecutive == 0
    assert all(torch.isfinite(p).all() for p in module.parameters())
    last = load_checkpoint_safely(tmp_path / "checkpoints" / "last.ckpt")
    assert last["callbacks"]["NonFiniteGuard"] == {"consecutive": 0, "skipped": 2}


@pytest.mark.filterwarnings("ignore:Using ModelCheckpoint with manual optimization")
def test_skip_policy_stops_after_too_many_in_a_row_without_saving_the_broken_state(tmp_path):
    guard, module = NonFiniteGuard("skip", max_skips=2), tiny_module(poison={3, 4, 5})
    checkpoints = every_step_checkpoints(tmp_path)
    assert checkpoints.save_on_exception is False  # Lightning's default, which the lab keeps
    t = trainer(tmp_path, [guard, checkpoints], max_steps=100, max_epochs=1)
    with pytest.raises(NonFiniteLossError) as info:
        t.fit(module, loader(8))
    message = one_line(info.value)
    assert "at step 3, 3 times in a row" in message
    assert f"the last checkpoint is {tmp_path / 'checkpoints' / 'last.ckpt'}" in message
    # nothing was written after the failure: the checkpoints are those of steps 1-3, weights finite
    assert steps_saved(tmp_path / "checkpoints") == {"last.ckpt": 3, "step1.ckpt": 1, "step2.ckpt": 2, "step3.ckpt": 3}
    last = load_checkpoint_safely(tmp_path / "checkpoints" / "last.ckpt")
    assert all(torch.isfinite(v).all() for v in last["state_dict"].values())


@pytest.mark.filterwarnings("ignore:Using ModelCheckpoint with manual optimization")
def test_stop_policy_in_a_real_run(tmp_path):
    module = tiny_module(poison={2})
    t = trainer(tmp_path, [NonFiniteGuard("stop"), every_step_checkpoints(tmp_path)], max_steps=100, max_epochs=1)
    with pytest.raises(NonFiniteLossError) as info:
        t.fit(module, loader(8))
    assert one_line(info.value) == (
        f"the loss became nan at step 2 (the weights were not updated); the last "
        f"checkpoint is {tmp_path / 'checkpoints' / 'last.ckpt'}; lower optim.lr, or "
        f"skip such steps with trainer.nonfinite=skip"
    )
    assert steps_saved(tmp_path / "checkpoints") == {"last.ckpt": 2, "step1.ckpt": 1, "step2.ckpt": 2}


# ============================================================================ preemption


class SignalAt(Callback):
    def __init__(self, step, signum):
        self.step, self.signum = step, signum

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


def test_sigusr1_saves_last_ckpt_and_stops_cleanly_in_process(tmp_path):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    handler = PreemptionHandler()
    t = trainer(
        tmp_path,
        [SignalAt(3, signal.SIGUSR1), handler, lab_checkpoint_callback(tmp_path)],
        max_steps=50,
        val_check_interval=100,
        check_val_every_n_epoch=None,
        limit_val_batches=1,
    )
    t.fit(tiny_module(), loader(100), loader(1))
    assert handler.preempted == "SIGUSR1"
    assert t.global_step == 3 and not t.received_sigterm
    assert handler.checkpoint_path == str(tmp_path / "checkpoints" / "last.ckpt")
    assert load_checkpoint_safely(handler.checkpoint_path)["global_step"] == 3
    assert {s: signal.getsignal(s) for s in before} == before  # handlers put back
    # the preemption checkpoint resumes
    resumed = trainer(tmp_path / "resumed", max_steps=5)
    resumed.fit(tiny_module(), loader(100), ckpt_path=handler.checkpoint_path)
    assert resumed.global_step == 5


def test_second_signal_hands_over_to_the_previous_handler():
    calls = []
    original = signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append(signum))
    try:
        previous = signal.getsignal(signal.SIGUSR2)
        handler = PreemptionHandler(signals=(signal.SIGUSR2,))
        handler._install([signal.SIGUSR2])
        os.kill(os.getpid(), signal.SIGUSR2)
        assert calls == [] and handler._received == signal.SIGUSR2  # first: only noted, for the batch end
        os.kill(os.getpid(), signal.SIGUSR2)
        assert calls == [signal.SIGUSR2]  # second: the previous handler, which is back in place
        assert signal.getsignal(signal.SIGUSR2) is previous
    finally:
        signal.signal(signal.SIGUSR2, original)


def test_slurm_auto_requeue_keeps_its_requeue_signal(tmp_path):
    from lightning.fabric.plugins.environments import LightningEnvironment, SLURMEnvironment

    handler = PreemptionHandler()
    requeue = SLURMEnvironment(auto_requeue=True, requeue_signal=signal.SIGUSR1)
    assert handler._handled_signals(requeue) == [signal.SIGTERM]
    assert handler._handled_signals(SLURMEnvironment(auto_requeue=False)) == [signal.SIGTERM, signal.SIGUSR1]
    assert handler._handled_signals(LightningEnvironment()) == [signal.SIGTERM, signal.SIGUSR1]
    # on_train_start finds the environment in the Trainer
    on_slurm = L.Trainer(accelerator="cpu", logger=False, plugins=[requeue], default_root_dir=str(tmp_path))
    from selfsup.common.upstream import cluster_environment

    assert cluster_environment(on_slurm) is requeue
    assert isinstance(cluster_environment(trainer(tmp_path)), LightningEnvironment)


# ============================================================================ secrets, memory


def test_redact_secret_keys_and_secret_looking_strings():
    wandb_key = "0123456789abcdef0123456789abcdef01234567"
    hf = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"
    config = {
        "logger": {"project": "selfsup", "api_key": "abc", "WANDB_API_KEY": "xyz", "entity": "lab"},
        "token": "t0k",
        "Secret": "s",
        "password": "p",
        "db-password": "p2",
        "hf_token": hf,
        "aws_secret_access_key": "AKIA",
        "auth": {"github_token": "ghp_1", "private_key": ["a", "b"]},
        "max_tokens": 1000,
        "mode_tokens": True,
        "hf_token_unset": None,
        "pad_token": "<pad>",
        "mask_token": "[MASK]",
        "use_token": True,
        "key": "any setting named key is a secret",
        "notes": f"run with key {wandb_key} and {hf} at https://user:hunter2@example.com/x",
        "list": [{"token": "z"}, wandb_key, "plain"],
        "pair": ("a", wandb_key),
        "n": 3,
    }
    out = redact(config)
    assert out["logger"] == {"project": "selfsup", "api_key": "***", "WANDB_API_KEY": "***", "entity": "lab"}
    for key in ("token", "Secret", "password", "db-password", "hf_token", "aws_secret_access_key"):
        assert out[key] == "***", key
    assert out["auth"] == {"github_token": "***", "private_key": ["***", "***"]}
    assert out["max_tokens"] == 1000 and out["mode_tokens"] is True and out["hf_token_unset"] is None
    assert out["pad_token"] == "<pad>" and out["mask_token"] == "[MASK]" and out["use_token"] is True
    assert out["key"] == "***"
    assert out["notes"] == "run with key *** and *** at https://user:***@example.com/x"
    assert out["list"] == [{"token": "***"}, "***", "plain"] and out["pair"] == ("a", "***") and out["n"] == 3
    assert config["token"] == "t0k" and config["list"][0]["token"] == "z"  # a copy: the input is unchanged
    # an OmegaConf config redacts the same
    assert redact(OmegaConf.create({"logger": {"api_key": "abc"}})) == {"logger": {"api_key": "***"}}


def test_secret_values_are_redacted_wherever_they_appear(monkeypatch):
    """A key that is not 40 hex characters, and any secret setting's value, also inside names, tags and a
    command line."""
    from selfsup.reliability.redact import register_secrets

    monkeypatch.setenv("WANDB_API_KEY", "local-server-key-1234")
    register_secrets({"logger": {"my_token": "tok-5678-abcd"}, "data": {"random_token_prob": 0.1}})
    assert redact(["mlm-encoder-local-server-key-1234", "tag=tok-5678-abcd", "selfsup-train", "0.1"]) == [
        "mlm-encoder-***",
        "tag=***",
        "selfsup-train",
        "0.1",
    ]
    assert redact({"name": "x tok-5678-abcd y", "random_token_prob": 0.1}) == {
        "name": "x *** y",
        "random_token_prob": 0.1,
    }


def test_rss_mb_sees_memory_being_used():
    before = rss_mb()
    block = bytearray(200 * 2**20)
    block[::4096] = b"x" * len(block[::4096])  # touch every page
    assert 150 < rss_mb() - before < 400
    assert before > 10
    del block


# ============================================================================ preemption by SIGTERM


PREEMPTED_RUN = """
import json, signal, sys
import lightning as L, torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from selfsup.data.vocab import Vocab
from selfsup.models import build_model
from selfsup.training.module import SelfSupModule
from selfsup.objectives import MaskedLM
from selfsup.optim import AdamWCosine
from selfsup.reliability.callbacks import PreemptionHandler
from selfsup.reliability.checkpoint_io import AtomicCheckpointIO

run_dir, marker = sys.argv[1], sys.argv[2]

class Progress(Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 3:
            open(marker, "w").close()

V = Vocab(size=300, n_sentinels=10)
torch.manual_seed(0)
module = SelfSupModule(build_model("encoder", V.size, 32, d_model=32, n_layers=1, n_heads=2), MaskedLM(V, 32),
                       AdamWCosine(warmup_steps=2), max_steps=1_000_000)
data = torch.utils.data.DataLoader(torch.randint(V.first_ordinary, V.size, (64, 32)), batch_size=8)
handler = PreemptionHandler()
trainer = L.Trainer(accelerator="cpu", max_steps=1_000_000, logger=False, enable_progress_bar=False,
                    enable_model_summary=False, default_root_dir=run_dir, plugins=[AtomicCheckpointIO()],
                    callbacks=[ModelCheckpoint(dirpath=run_dir + "/checkpoints", save_last=True), Progress(), handler])
trainer.fit(module, data)
print(json.dumps({"preempted": handler.preempted, "checkpoint": handler.checkpoint_path,
                  "global_step": trainer.global_step, "received_sigterm": trainer.received_sigterm,
                  "sigterm_restored": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL}))
sys.exit(0 if handler.preempted else 3)   # the lab: a preempted run exits 0
"""


def wait_for(condition, proc, timeout):
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the process ended early with code {proc.returncode}")
        if time.monotonic() > deadline:
            pytest.fail("no progress in time")
        time.sleep(0.05)


# a fresh interpreter (~12 s); the default suite: the in-process SIGUSR1 checkpoint above, and SIGTERM through
# selfsup-train (exit 0, status preempted) in tests/e2e/test_stop.py
@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_exits_0(tmp_path):
    """A real training process (a script, a fresh interpreter) gets SIGTERM after step 3."""
    script, marker, run_dir = tmp_path / "run.py", tmp_path / "step3", tmp_path / "run"
    script.write_text(textwrap.dedent(PREEMPTED_RUN))
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with open(tmp_path / "stdout.txt", "w") as out, open(tmp_path / "stderr.txt", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(script), str(run_dir), str(marker)], stdout=out, stderr=err, env=env
        )
    try:
        wait_for(marker.exists, proc, timeout=120)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (tmp_path / "stderr.txt").read_text()[-2000:]
    result = json.loads((tmp_path / "stdout.txt").read_text().strip().splitlines()[-1])
    assert result["preempted"] == "SIGTERM" and not result["received_sigterm"] and result["sigterm_restored"]
    assert result["checkpoint"] == str(run_dir / "checkpoints" / "last.ckpt")
    ckpt = load_checkpoint_safely(result["checkpoint"])
    assert ckpt["global_step"] >= 3 and ckpt["global_step"] == result["global_step"]
    assert not [p for p in (run_dir / "checkpoints").iterdir() if p.name.endswith(".tmp")]


def test_sigterm_once_a_run_has_ended_is_noted_and_a_second_one_stops_at_once():
    """selfsup-train's handler after fit: the run's records are written; a sweep starts no further job."""
    from selfsup.reliability import stop
    from selfsup.run.lifecycle import after_run

    previous = signal.signal(signal.SIGTERM, after_run)
    try:
        stop.clear()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.received == "SIGTERM" and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop.clear()
