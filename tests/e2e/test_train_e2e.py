"""selfsup-train end to end: every objective trains, logs to W&B offline, checkpoints and resumes."""

import csv
import json
import math
import os
import subprocess

import pytest

from conftest import TINY, wandb_history, wandb_run_record, wandb_summary

OBJECTIVES = {"mlm": "encoder", "clm": "decoder", "span_corruption": "encoder_decoder",
              "prefix_lm": "decoder", "ul2": "encoder_decoder"}


@pytest.fixture(scope="module")
def sweep(cache_dir, tmp_path_factory):
    """One multirun over all objectives, each with its default architecture."""
    root = tmp_path_factory.mktemp("sweep")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}  # no key: auto -> offline
    out = subprocess.run(["selfsup-train", "-m", *TINY, f"data.cache_dir={cache_dir}", f"hydra.sweep.dir={root}",
                          "objective=" + ",".join(OBJECTIVES)], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return root, out


@pytest.mark.parametrize("job,objective", list(enumerate(OBJECTIVES)))
def test_each_objective_trains_with_its_default_architecture(sweep, job, objective):
    root, _ = sweep
    run = root / str(job)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert (summary["objective"], summary["architecture"]) == (objective, OBJECTIVES[objective])
    assert summary["steps"] == 6 and summary["parameters"] > 0
    assert math.isfinite(summary["val_loss"]) and summary["val_perplexity"] == pytest.approx(math.exp(summary["val_loss"]), rel=1e-4)
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert (run / ".hydra" / "config.yaml").is_file()
    rows = list(csv.DictReader(open(run / "csv" / "metrics.csv")))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert len(losses) == 6 and all(math.isfinite(x) for x in losses)


@pytest.mark.parametrize("job,objective", list(enumerate(OBJECTIVES)))
def test_each_job_is_a_finished_wandb_run_with_the_logged_values(sweep, job, objective):
    root, _ = sweep
    run = root / str(job)
    summary = json.loads((run / "summary.json").read_text())
    recorded = wandb_summary(run)
    assert recorded["state"] == "finished" and recorded["exit_code"] == 0
    assert recorded["config"]["objective"]["name"] == objective  # the resolved Hydra config is the run config
    assert f"objective={objective}" in recorded["tags"]
    assert recorded["summary"]["val/loss"] == pytest.approx(summary["val_loss"], rel=1e-6)
    for key in ("train/loss", "train/perplexity", "train/accuracy", "train/signal_per_token", "train/tokens_seen",
                "train/targets_seen", "train/flops_seen", "val/perplexity", "val/accuracy", "val/signal_per_token",
                "perf/tokens_per_sec"):
        assert key in recorded["summary"], key
    # the comparable evaluation: in the W&B run, the CSV and summary.json alike
    evaluated = summary["eval"]
    assert set(evaluated) == {"eval/fixed/loss", "eval/fixed/perplexity", "eval/probe/accuracy", "eval/probe/macro_f1",
                              "eval/probe/random_init_accuracy", "eval/probe/random_init_macro_f1",
                              "eval/probe/majority_accuracy"}
    for key, value in evaluated.items():
        assert recorded["summary"][key] == pytest.approx(value, rel=1e-6), key
    assert 0 < evaluated["eval/probe/accuracy"] < 1 and evaluated["eval/fixed/loss"] > 0
    rows = [r for r in csv.DictReader(open(run / "csv" / "metrics.csv")) if r.get("eval/probe/accuracy")]
    assert len(rows) == 1 and float(rows[0]["train/tokens_seen"]) == summary["tokens_seen"]  # after training, once
    assert summary["flops_seen"] == pytest.approx(recorded["summary"]["train/flops_seen"]) and summary["flops_seen"] > 0
    tokens = [row["train/tokens_seen"] for row in wandb_history(run) if "train/loss" in row]
    assert tokens == sorted(tokens) and tokens[-1] == summary["tokens_seen"]


def test_sweep_jobs_share_one_wandb_group_and_print_a_table(sweep):
    root, out = sweep
    runs = [wandb_run_record(root / str(job)) for job in range(len(OBJECTIVES))]
    assert len({r["run_group"] for r in runs}) == 1 and runs[0]["run_group"].startswith("sweep-")
    assert len({r["run_id"] for r in runs}) == len(OBJECTIVES)
    for job, objective in enumerate(OBJECTIVES):
        assert runs[job]["display_name"] == f"{objective}-{OBJECTIVES[objective]}"  # fixed overrides stay out
        assert f"[job {job}] objective={objective}: val loss" in out.stdout
        assert any(line.startswith(f"{job}   | {objective} ") for line in out.stdout.splitlines())  # table row
    assert "val loss" in out.stdout and "signal/token" in out.stdout and "tokens/s" in out.stdout
    assert "fixed loss" in out.stdout and "probe acc" in out.stdout
    assert "Probe (eval/probe/accuracy): " in out.stdout and " leads with " in out.stdout


def test_signal_per_token_follows_the_objective(sweep):
    root, _ = sweep
    signal = {o: json.loads((root / str(j) / "summary.json").read_text())["signal_per_token"]
              for j, o in enumerate(OBJECTIVES)}
    assert signal["clm"] == pytest.approx(32 / 33)          # every token but the first of the window
    assert 0.05 < signal["mlm"] < 0.3                         # ~15% of tokens
    assert signal["mlm"] < signal["span_corruption"] < signal["clm"]


@pytest.mark.slow  # resume=RUN_DIR is tested bitwise in test_resume.py
def test_resume_from_checkpoint_continues(train, tmp_path):
    first = train("objective=clm", run_dir=tmp_path / "a")
    assert first.returncode == 0, first.stderr[-2000:]
    ckpt = tmp_path / "a" / "checkpoints" / "last.ckpt"
    resumed = train("objective=clm", f"ckpt_path={ckpt}", "trainer.max_steps=9", run_dir=tmp_path / "b")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a = json.loads((tmp_path / "a" / "summary.json").read_text())
    b = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert (a["steps"], b["steps"]) == (6, 9)
    assert b["tokens_seen"] == 9 * 8 * 33  # counters continue from the checkpoint
    rows = list(csv.DictReader(open(tmp_path / "b" / "csv" / "metrics.csv")))
    assert [int(r["step"]) for r in rows if r.get("train/loss")] == [6, 7, 8]
