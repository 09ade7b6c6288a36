"""A run dir written before the lab's folders by role (tests/fixtures/old_run: `selfsup-train debug=tiny objective=clm
trainer.max_steps=3`, its records naming selfsup.run_dir.RunDirGuard, selfsup.throughput.TokenThroughput, ...)
resumes, is evaluated by selfsup-eval, exports and is reported by today's code."""

import csv
import json
import os
import shutil
from pathlib import Path

import forked
import pytest

FIXTURE = Path(__file__).parents[1] / "fixtures" / "old_run"
ENV = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
EVAL = [
    "~eval.tasks.replaced_word",
    "eval.tasks.next_sentence.max_train_examples=64",
    "eval.tasks.next_sentence.max_test_examples=40",
    "eval.finetune.steps=3",
    "eval.finetune.max_length=48",
    "eval.probe.random_init_seeds=2",
    "eval.generation=null",
]


def run(tmp_path: Path, *args: str):
    done = forked.run(list(args), capture_output=True, text=True, env=ENV, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


# resume, evaluate, export and report of a stored old run (~26 s); the default suite: tests/test_run_dir.py reads old
# records
@pytest.mark.slow
def test_an_old_run_dir_resumes_evaluates_exports_and_reports(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "run")
    recorded = (tmp_path / "run" / ".hydra" / "hydra.yaml").read_text()
    assert "selfsup.run_dir.RunDirGuard" in recorded  # the old paths, kept by their shims

    run(tmp_path, "selfsup-train", "resume=run", "trainer.max_steps=6")
    with (tmp_path / "run" / "csv" / "resume-1" / "metrics.csv").open() as f:
        steps = {int(r["step"]) for r in csv.DictReader(f) if r.get("train/loss")}
    assert steps == {3, 4, 5}  # the resumed segment trained steps 4-6 (0-based 3-5)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "finished"

    out = run(tmp_path, "selfsup-eval", "run", *EVAL)
    assert "next_sentence" in out.stdout
    assert "eval/next_sentence/accuracy" in json.loads((tmp_path / "run" / "evaluated.json").read_text())["eval"]

    run(tmp_path, "selfsup-export", "run", "export")
    from transformers import AutoModelForCausalLM

    assert type(AutoModelForCausalLM.from_pretrained(tmp_path / "export")).__name__ == "GPT2LMHeadModel"

    run(tmp_path, "selfsup-report", "run", "--format", "md", "--out", "report.md")
    assert "| run | clm | decoder |" in (tmp_path / "report.md").read_text()
