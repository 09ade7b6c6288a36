"""selfsup-eval under faults (issue 66): its own files damaged, a run dir it cannot write, a full disk while it
writes its scores, Ctrl-C while it evaluates. Each is one `error:` line, a non-zero exit, and the run's files as
they were: nothing valid dropped, nothing half-written, no temporary file left."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import forked
import pytest

ENV = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
SMALL = [  # a few seconds of evaluation: one tiny fine-tuned task
    "eval.tasks.next_sentence.max_train_examples=64",
    "eval.tasks.next_sentence.max_test_examples=40",
    "~eval.tasks.replaced_word",
    "eval.finetune.steps=3",
    "eval.finetune.seeds=1",
    "eval.probe.random_init_seeds=1",
    "eval.generation=null",
]


def selfsup_eval(*args) -> subprocess.CompletedProcess:
    return forked.run(["selfsup-eval", *map(str, args)], capture_output=True, text=True, env=ENV, timeout=600)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def one_error_line(out: subprocess.CompletedProcess, code: int = 2) -> str:
    assert out.returncode == code and out.stderr.count("\n") == 1, out.stderr[-3000:]
    assert out.stderr.startswith("error: ") and "Traceback" not in out.stderr
    return out.stderr


def mount(path: Path, options: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs (a read-only or full disk)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs failed here: {done.stderr.decode().strip()}")


# The tests of this evaluated run are slow (~20 s for the run): the default suite has selfsup-eval's bad-input lines
# (test_eval_e2e.py)
@pytest.fixture(scope="module")
def evaluated(cache_dir, tmp_path_factory) -> Path:
    """A tiny finished CLM run (its training-time evaluation: summary.json's scores and outcomes.npz), evaluated
    once by selfsup-eval (its evaluated.json and evaluated_outcomes.npz)."""
    root = tmp_path_factory.mktemp("evalfaults")
    out = forked.run(
        ["selfsup-train", "debug=tiny", "objective=clm", f"data.cache_dir={cache_dir}",
         f"hydra.run.dir={root / 'run'}"],
        capture_output=True, text=True, env=ENV, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    done = selfsup_eval(root / "run", *SMALL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (root / "run" / "evaluated.json").is_file() and (root / "run" / "evaluated_outcomes.npz").is_file()
    return root / "run"


@pytest.fixture
def run(evaluated, tmp_path) -> Path:
    """A copy of the evaluated run, to damage."""
    return Path(shutil.copytree(evaluated, tmp_path / "run"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, damage, said",
    [
        ("evaluated_outcomes.npz", lambda b: b[: len(b) // 2], "evaluated_outcomes.npz cannot be read"),
        ("evaluated.json", lambda b: b[: len(b) // 2], "evaluated.json cannot be read as selfsup-eval's scores"),
        ("evaluated.json", lambda b: b'{"eval": null}', "evaluated.json cannot be read as selfsup-eval's scores"),
    ],
)
def test_damaged_scores_of_an_earlier_evaluation_are_refused_before_anything_is_evaluated(run, name, damage, said):
    """Before: the damaged file's intact partner was dropped with it and the history restarted, without a word."""
    (run / name).write_bytes(damage((run / name).read_bytes()))
    before = snapshot(run)
    out = selfsup_eval(run, *SMALL, "eval.finetune.steps=4")
    assert said in one_error_line(out) and "move it and" in out.stderr and "nothing was evaluated" in out.stderr
    assert snapshot(run) == before and "evaluating" not in out.stdout


def in_a_sweep(run: Path, tmp_path: Path) -> Path:
    """A sweep folder holding the run (moved) as its job 0."""
    (tmp_path / "sweep").mkdir()
    shutil.move(run, tmp_path / "sweep" / "0")
    return tmp_path / "sweep"


def markdown_report(sweep: Path, out: Path) -> str:
    """selfsup-report's Markdown of the sweep, written to `out`: its text."""
    done = forked.run(
        ["selfsup-report", str(sweep), "--format", "md", "--out", str(out)],
        capture_output=True, text=True, env=ENV, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out.read_text()


def _edited(key: str, value):
    def edit(b: bytes) -> bytes:
        content = json.loads(b)
        content["eval"][key] = value
        return json.dumps(content).encode()  # NaN as NaN: what a hand edit or another tool writes

    return edit


def _margin(b: bytes) -> bytes:
    content = json.loads(b)
    content["eval"].update(
        {"eval/next_sentence/margin": 5.0, "eval/next_sentence/margin_low": 4.9, "eval/next_sentence/margin_high": 5.1}
    )
    return json.dumps(content).encode()


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage, said",
    [
        (lambda b: b[: len(b) // 2], "evaluated.json unreadable: "),
        (lambda b: b"[1, 2]", "evaluated.json unreadable: a JSON list, not an object"),
        (lambda b: b'{"eval": null}', "evaluated.json unreadable: eval is missing or null"),
        (_edited("eval/next_sentence/margin", "high"), "evaluated.json unreadable: eval eval/next_sentence/margin is "),
        (_edited("eval/next_sentence/margin", float("nan")), "eval/next_sentence/margin is nan, not a finite number"),
        (_margin, "outcomes do not match evaluated.json's eval/next_sentence/margin"),
    ],
)
def test_the_report_names_a_run_whose_evaluated_json_is_damaged_or_contradicts_its_outcomes(
    run, tmp_path, damage, said
):
    """Before: the run vanished from the report's 'Evaluated after training' section and its verdict without a
    word, or its edited margin (5.0 [4.9, 5.1]) was shown there as 'shows pretraining'."""
    sweep = in_a_sweep(run, tmp_path)
    (sweep / "0" / "evaluated.json").write_bytes(damage((sweep / "0" / "evaluated.json").read_bytes()))
    report = markdown_report(sweep, tmp_path / "r.md")
    section = report.split("## Evaluated after training", 1)[1].split("\n## ", 1)[0]
    left_out = [line for line in section.splitlines() if line.startswith("- left out: clm (0): ")]
    assert len(left_out) == 1 and said in left_out[0], section
    assert "+5.000" not in report and "shows pretraining" not in section


@pytest.mark.slow
@pytest.mark.parametrize("edit", ["margin", "interval"])
def test_a_run_whose_summary_json_contradicts_its_outcomes_shows_no_scores_and_is_named(run, tmp_path, edit):
    """Before: a margin edited in summary.json (5.0 [4.9, 5.1]), or its interval alone, reached the report's table
    and verdict."""
    sweep = in_a_sweep(run, tmp_path)
    summary = json.loads((sweep / "0" / "summary.json").read_text())
    if edit == "margin":
        summary["eval"].update({"eval/pairs/margin": 5.0, "eval/pairs/margin_low": 4.9, "eval/pairs/margin_high": 5.1})
    else:
        summary["eval"]["eval/pairs/margin_high"] += 0.25
    (sweep / "0" / "summary.json").write_text(json.dumps(summary))
    report = markdown_report(sweep, tmp_path / "r.md")
    why = "outcomes do not match summary.json's eval/pairs/margin" + ("" if edit == "margin" else "_high")
    assert f"- left out: clm (0): {why}" in report.splitlines(), report
    assert "+5.000" not in report and f"{summary['eval']['eval/pairs/margin_high']:+.3f}" not in report


@pytest.mark.slow
def test_a_run_dir_that_cannot_be_written_is_refused_before_anything_is_evaluated(evaluated, tmp_path):
    """Before: evaluated in full, then a traceback when writing."""
    disk = tmp_path / "ro"
    mount(disk, "size=64m")
    try:
        shutil.copytree(evaluated, disk / "run")
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        before = snapshot(disk)
        out = selfsup_eval(disk / "run", *SMALL, "eval.finetune.steps=4")
        assert "run cannot be written (Read-only file system): selfsup-eval writes its scores there" in one_error_line(
            out
        )
        assert snapshot(disk) == before and "evaluating" not in out.stdout
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.mark.slow
def test_a_full_disk_while_writing_the_scores_keeps_the_former_pair_and_no_temporary_file(evaluated, tmp_path):
    """Before: the npz replaced without its json, or a 0-byte .evaluated_outcomes.npz.tmp.npz left behind."""
    disk = tmp_path / "full"
    mount(disk, "size=64m")
    try:
        shutil.copytree(evaluated, disk / "run")
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:  # the disk filled to its last byte
            for size in (65536, 1):
                try:
                    while True:
                        os.write(fd, b"\0" * size)
                except OSError:
                    pass
        finally:
            os.close(fd)
        before = snapshot(disk / "run")
        out = selfsup_eval(disk / "run", *SMALL, "eval.finetune.steps=4")
        line = one_error_line(out)
        assert "evaluated.json and evaluated_outcomes.npz could not be written (No space left on device)" in line
        assert "its former scores are unchanged" in line
        assert snapshot(disk / "run") == before  # the former pair, and no temporary file
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.mark.slow
def test_ctrl_c_while_evaluating_is_one_line_and_keeps_the_former_scores(run):
    """Before: a KeyboardInterrupt traceback."""
    before = snapshot(run)
    env = {**ENV, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        ["selfsup-eval", str(run), *SMALL, "eval.finetune.steps=400", "eval.finetune.max_length=128"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    for line in process.stdout:
        if line.startswith(f"{run}: "):  # the run's evaluation began
            break
    time.sleep(2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    out = subprocess.CompletedProcess(process.args, process.returncode, "", stderr)
    assert "interrupted (Ctrl-C): the runs evaluated before it keep their evaluated.json" in one_error_line(out, 130)
    assert snapshot(run) == before


@pytest.mark.slow  # a sweep with a failed and a live job (~11 s); the default suite: selfsup-eval's bad-input lines
def test_a_sweep_with_a_failed_job_and_one_still_training_evaluates_the_finished_one_and_names_the_others(
    evaluated, tmp_path
):
    """Before: the whole sweep refused for the failed job, the one still training skipped without a word, and
    pointing at it said 'holds no runs'."""
    import json

    sweep = tmp_path / "sweep"
    for job in ("0", "1"):
        shutil.copytree(evaluated, sweep / job, ignore=shutil.ignore_patterns("evaluated*"))
    summary = json.loads((sweep / "1" / "summary.json").read_text())
    (sweep / "1" / "summary.json").write_text(json.dumps({**summary, "status": "failed"}))
    (sweep / "1" / "error.txt").write_text("error: out of memory\n")
    (sweep / "2" / ".hydra").mkdir(parents=True)  # a job still training: its config, no records yet
    shutil.copy(evaluated / ".hydra" / "config.yaml", sweep / "2" / ".hydra" / "config.yaml")
    out = selfsup_eval(sweep, *SMALL)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"left out: {sweep / '1'} (failed: out of memory)\n" in out.stdout
    assert f"left out: {sweep / '2'} (no summary.json: still training, or stopped before writing it)\n" in out.stdout
    assert [p.parent.name for p in sorted(sweep.glob("*/evaluated.json"))] == ["0"]
    out = selfsup_eval(sweep / "2", *SMALL)
    assert f"{sweep / '2'} did not finish training (no summary.json: still training, or stopped before writing it)" in (
        one_error_line(out)
    )
