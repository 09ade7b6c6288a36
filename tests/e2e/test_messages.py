"""What the lab says: the console of a run (a log file and a 100-column terminal), the W&B console log, and
messages whose suggested command is run to show it works; a refused command creates nothing."""

import fcntl
import json
import os
import pty
import random
import re
import select
import shlex
import shutil
import struct
import subprocess
import termios
from pathlib import Path

import forked
import pytest
from conftest import TINY

ENV = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
WORDS = (
    "the model reads a sentence and predicts every hidden word from the words around it while the "
    "decoder writes the spans that were replaced by sentinels in order"
).split()


def selfsup(args, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return forked.run(["selfsup-train", *args], capture_output=True, text=True, env=ENV, cwd=cwd, timeout=timeout)


def suggested(message: str, after: str) -> list[str]:
    command = message.split(after, 1)[1].strip()
    assert command.startswith("selfsup-train "), message
    return shlex.split(command)[1:]


def error_line(out) -> str:
    [line] = [x for x in out.stderr.splitlines() if x.startswith("error: ")]
    return line


@pytest.fixture(scope="module")
def lab(tmp_path_factory, cache_dir):
    """A folder with a text corpus and a finished 40-step run (`run`) trained on it, progress lines on."""
    root = tmp_path_factory.mktemp("lab")
    rng = random.Random(0)
    (root / "corpus.jsonl").write_text(
        "".join(
            json.dumps({"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))}) + "\n"
            for _ in range(400)
        )
    )
    args = [
        *TINY,
        f"data.cache_dir={cache_dir}",
        "data.source=text_files",
        "data.paths=[corpus.jsonl]",
        "eval.tasks=null",
        "trainer.progress_bar=true",
        "trainer.max_steps=40",
        "trainer.val_check_interval=20",
    ]
    out = selfsup([*args, "hydra.run.dir=run"], root)
    assert out.returncode == 0, out.stderr[-3000:]
    return root, args, out


# a run's whole console (~10 s); the default suite: test_train_e2e.py reads a sweep's printed table and verdict
@pytest.mark.slow
def test_the_console_of_a_run_in_a_log_file(lab):
    """A plain line every 2 steps (40 steps: about 20 lines), one line per validation, the end of the run;
    nothing wider than 100 columns, no negative epoch or version hash; W&B's console log holds the same lines."""
    root, _, out = lab
    lines = (out.stdout + out.stderr).splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert not re.search(r"/-\d", out.stderr) and "v_num" not in out.stderr and "Epoch" not in out.stderr
    progress = [line for line in out.stderr.splitlines() if line.startswith("step ")]
    assert [line.split()[1] for line in progress] == [f"{s}/40" for s in range(2, 41, 2)]
    assert all(re.search(r"loss \d", line) and "tokens/s" in line and "left" in line for line in progress)
    validations = [line for line in out.stderr.splitlines() if line.startswith("val at step ")]
    assert [line.split(":")[0] for line in validations] == ["val at step 20", "val at step 40"]
    assert "fixed exam" in validations[-1]  # the evaluation after training, in the last validation's line
    summary = json.loads((root / "run" / "summary.json").read_text())
    assert out.stdout.splitlines()[0].startswith("finished: mlm on encoder, 0.03M parameters, 40 steps, wall time ")
    assert f"tokens/s {summary['tokens_per_sec']:,.0f} (training time" in out.stdout
    assert "run dir: run" in out.stdout and "  upload: wandb sync run/wandb/offline-run-" in out.stdout
    [log] = (root / "run" / "wandb").glob("offline-run-*/files/output.log")
    recorded = log.read_text()
    assert "\r" not in recorded and [x for x in recorded.splitlines() if x.startswith("step ")] == progress


# a run's whole console (~15 s); the default suite: test_train_e2e.py reads a sweep's printed table and verdict
@pytest.mark.slow
def test_the_console_of_a_run_in_a_100_column_terminal(lab, tmp_path):
    """In a terminal the progress line is redrawn in place, around W&B's capture: every screen line fits
    100 columns and the W&B console log holds only the lasting lines."""
    root, args, _ = lab
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal of 100 columns
        os.chdir(root)
        os.execvpe(
            "selfsup-train",
            [
                "selfsup-train",
                *args,
                "trainer.max_steps=60",
                "trainer.val_check_interval=30",
                f"hydra.run.dir={tmp_path / 'tty'}",
            ],
            ENV,
        )
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    screen, status = b"", None
    while True:  # until the run exits (W&B's service may hold the terminal open a while longer)
        ready, _, _ = select.select([fd], [], [], 0.5)
        try:
            chunk = os.read(fd, 65536) if ready else b""
        except OSError:  # the terminal closed
            chunk = b""
        screen += chunk
        if status is None:
            done, status = os.waitpid(pid, os.WNOHANG)
            status = status if done else None
        if status is not None and not chunk:
            break
    assert os.waitstatus_to_exitcode(status) == 0, screen.decode(errors="replace")[-3000:]
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.decode(errors="replace"))
    drawn = [x for x in re.split(r"[\r\n]+", text) if x.strip()]
    wide = [x for x in drawn if len(x) > 99 and "wandb/offline-run-" not in x]
    assert drawn and not wide, wide
    assert any(x.startswith("step 1/60 ") for x in drawn)  # the live line, drawn at the first step
    [log] = (tmp_path / "tty" / "wandb").glob("offline-run-*/files/output.log")
    recorded = [x for x in log.read_text().splitlines() if x.startswith("step ")]
    steps = [int(x.split()[1].split("/")[0]) for x in recorded]
    assert steps == list(range(3, 61, 3))  # the lasting lines only, once each: no repaints


# two runs (~18 s with the module's runs); the default suite: tests/test_reliability.py refuses a truncated checkpoint
@pytest.mark.slow
def test_a_damaged_last_checkpoint_names_a_resume_from_another_that_works(lab, tmp_path):
    root, _, _ = lab
    run = tmp_path / "run"
    shutil.copytree(root / "run", run)
    last = run / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])
    before = sorted(p.name for p in run.rglob("*"))
    from selfsup.errors import UserError
    from selfsup.run.run_dir import check_resume

    with pytest.raises(UserError) as refused:  # what `selfsup-train resume=RUN` checks first (in-process here)
        check_resume(run, [f"resume={run}", "trainer.max_steps=46"])
    line = str(refused.value)
    assert "is truncated or not a checkpoint" in line and "continue from another checkpoint of the run" in line
    assert sorted(p.name for p in run.rglob("*")) == before  # refused: nothing written
    args = suggested(line, "continue from another checkpoint of the run: ")
    assert args[0] == f"resume={run}" and args[1].startswith(f"ckpt_path={run / 'checkpoints' / 'best-step'}")
    again = selfsup([*args, "trainer.max_steps=46", "logger.wandb=false"], root)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["steps"] == 46


# two runs (~8 s); the default suite refuses a resume of other settings in-process (test_reliability.py)
@pytest.mark.slow
def test_a_checkpoint_of_other_settings_names_the_command_with_its_settings(lab, tmp_path):
    root, args, _ = lab
    checkpoint = root / "run" / "checkpoints" / "last.ckpt"
    out = selfsup(
        [*args, f"ckpt_path={checkpoint}", "architecture.d_model=48", f"hydra.run.dir={tmp_path / 'new'}"], root
    )
    assert out.returncode == 2 and not (tmp_path / "new").exists()  # refused before anything is written
    line = error_line(out)
    assert "architecture.d_model is 32 in the checkpoint but 48 now" in line
    command = suggested(line, "train with the checkpoint's settings: ")
    assert "architecture.d_model=32" in command and "architecture.d_model=48" not in command
    again = selfsup([*command, "trainer.max_steps=46", "logger.wandb=false", f"hydra.run.dir={tmp_path / 'new'}"], root)
    assert again.returncode == 0, again.stderr[-3000:]


@pytest.mark.slow  # two runs (~15 s); the default suite refuses a resume on changed data in-process (test_reliability)
def test_resuming_on_changed_data_names_the_resume_once_the_data_is_back(lab, tmp_path):
    root, _, _ = lab
    work = tmp_path / "work"
    shutil.copytree(root, work)
    corpus = work / "corpus.jsonl"
    original = corpus.read_text()
    corpus.write_text(original.replace("model", "network"))
    out = selfsup(["resume=run", "trainer.max_steps=46"], work)
    assert out.returncode == 2
    line = error_line(out)
    assert "the run's data changed since it was trained" in line
    corpus.write_text(original)  # the data put back
    again = selfsup([*suggested(line, "then continue: "), "trainer.max_steps=46", "logger.wandb=false"], work)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((work / "run" / "summary.json").read_text())["steps"] == 46


@pytest.mark.parametrize(
    "args",
    [["optim.lr=-1"], ["data.source=text_files", "data.paths=[nope.txt]"], ["resume=outputs/typo"]],
    ids=["setting", "data", "resume"],
)
def test_a_refused_command_creates_nothing(tmp_path, args):
    out = selfsup(["debug=tiny", *args], tmp_path)
    assert out.returncode == 2 and out.stderr.startswith("error: ") and len(out.stderr.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


# the module's runs; the default suite: tests/test_reliability.py refuses a mismatched resume in-process
@pytest.mark.slow
def test_resuming_with_another_runs_checkpoint_says_which_is_which_and_asks_for_no_override(lab, tmp_path):
    """resume=RUN ckpt_path=<a checkpoint of other settings>: no override asked for the change, so the words say
    that the checkpoint is another run's (they used to swap the two and ask to drop an override never given)."""
    import torch

    from selfsup.errors import UserError
    from selfsup.run.run_dir import check_resume

    root, _, _ = lab
    run = root / "run"
    other = tmp_path / "other.ckpt"
    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    trained = checkpoint["selfsup"]["config"]["objective"]["mask_rate"]
    checkpoint["selfsup"]["config"]["objective"]["mask_rate"] = 0.3
    torch.save(checkpoint, other)
    with pytest.raises(UserError) as refused:
        check_resume(run, [f"resume={run}", f"ckpt_path={other}", "trainer.max_steps=46"])
    assert str(refused.value) == (
        f"resume={run} ckpt_path={other}: that checkpoint was trained with objective.mask_rate=0.3, the run with "
        f"objective.mask_rate={trained}: nothing was changed; pass a checkpoint of this run (in {run / 'checkpoints'}), "
        f"or start a new run from that one with ckpt_path= and without resume="
    )
