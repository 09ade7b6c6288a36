"""selfsup-train end to end: every objective trains, logs to W&B offline, checkpoints and resumes."""

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

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
                          "logger.log_model=true", "objective=" + ",".join(OBJECTIVES)],
                         capture_output=True, text=True, env=env, timeout=600)
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


# ---------------------------------------------------------------- the model out of the lab (selfsup.load, selfsup-sample)
def test_a_copied_run_dir_loads_in_a_fresh_process(sweep, tmp_path):
    """The run dir holds the tokenizer, the checkpoint holds the settings and the tokenizer too: a copy of the
    run dir elsewhere loads, and encodes text to the same ids as the data's tokenizer."""
    import shutil
    import sys

    import torch
    from tokenizers import Tokenizer
    root, _ = sweep
    copy = tmp_path / "elsewhere"
    shutil.copytree(root / "1", copy)
    record = torch.load(copy / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")["selfsup"]
    assert Tokenizer.from_str(record["tokenizer"]).to_str() == Tokenizer.from_file(str(copy / "tokenizer.json")).to_str()
    script = ("import sys, selfsup; p = selfsup.load(sys.argv[1]); "
              "print(p.architecture, p.config['objective']['name'], p.encode('The module is here'), p.model.training)")
    out = subprocess.run([sys.executable, "-c", script, str(copy)], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    expected = Tokenizer.from_str(record["tokenizer"]).encode("The module is here").ids
    assert out.stdout.split(" ", 2)[:2] == ["decoder", "clm"] and str(expected) in out.stdout
    assert out.stdout.strip().endswith("False")  # eval mode


def test_sample_shows_what_each_architecture_predicts(sweep, capsys):
    import selfsup
    from selfsup.sample import main as sample
    root, _ = sweep
    decoder = selfsup.load(root / "1")
    greedy = decoder.generate("The module", max_new_tokens=8)
    assert greedy == decoder.generate("The module", max_new_tokens=8)  # greedy is deterministic
    assert decoder.generate("The module", 8, temperature=1.0, top_k=1) == greedy  # top-1 sampling is greedy
    assert decoder.generate("The", 8, 1.0, seed=3) == decoder.generate("The", 8, 1.0, seed=3)
    sample([str(root / "0"), "--prompt", "The <mask> of the <mask>", "--top-k", "3"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("encoder from ") and lines[1] == "The <mask> of the <mask>"
    masks = selfsup.load(root / "0").fill_masks("The <mask> of the <mask>", top_k=3)
    assert len(masks) == 2 and all(len(m) == 3 for m in masks)
    assert all(p[0][1] >= p[1][1] >= p[2][1] > 0 for p in masks) and lines[2].startswith("<mask> 0: ")
    spans = selfsup.load(root / "2").fill_spans("The <extra_id_0> of the <extra_id_1> is", max_new_tokens=8)
    assert list(spans) == ["<extra_id_0>", "<extra_id_1>"] and all(isinstance(v, str) for v in spans.values())
    sample([str(root / "1"), "--max-new-tokens", "8"])
    assert capsys.readouterr().out.splitlines()[1] == "The module" + greedy


def test_bad_input_to_load_is_one_line(sweep, tmp_path, capsys):
    import torch

    from selfsup.sample import main as sample
    root, _ = sweep
    empty = tmp_path / "run"
    (empty / ".hydra").mkdir(parents=True)
    other = tmp_path / "other.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, other)
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"not a checkpoint")
    cases = [(empty, "holds no weights"), (other, "is not a selfsup checkpoint"),
             (junk, "is truncated or not a checkpoint"), (tmp_path / "nope", "does not exist")]
    for path, words in cases:
        with pytest.raises(SystemExit) as done:
            sample([str(path)])
        err = capsys.readouterr().err
        assert done.value.code == 2 and err.startswith("error: ") and words in err and len(err.splitlines()) == 1
    import selfsup
    from selfsup.checks import SelfSupError
    with pytest.raises(SelfSupError, match="fill_masks needs a model of architecture encoder; this one is decoder"):
        selfsup.load(root / "1").fill_masks("The <mask>")


def test_log_model_puts_the_checkpoints_and_tokenizer_in_a_wandb_model_artifact(sweep):
    root, _ = sweep
    run = root / "1"
    [offline] = list((run / "wandb").glob("offline-run-*"))
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(offline)],
                         capture_output=True, text=True, timeout=120)
    [artifact] = [json.loads(line)["artifact"] for line in out.stdout.splitlines()
                  if line.strip() and json.loads(line).get("type") == "artifact"]
    record = wandb_run_record(run)
    assert artifact["name"] == f"model-{record['run_id']}" and artifact["type"] == "model"
    assert artifact["aliases"] == ["latest"]
    files = {entry["path"] for entry in artifact["manifest"]["contents"]}
    summary = json.loads((run / "summary.json").read_text())
    assert files == {Path(summary["best_checkpoint"]).name, "last.ckpt", "tokenizer.json"}
    metadata = artifact["metadata"] if isinstance(artifact["metadata"], dict) else json.loads(artifact["metadata"])
    assert metadata["config"]["objective"]["name"] == "clm" and metadata["steps"] == 6
    assert metadata["val_loss"] == pytest.approx(summary["val_loss"])
