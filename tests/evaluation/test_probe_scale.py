"""At the scale docs/evaluation.md documents, pretraining shows on the probe (slow: ~90 s of training)."""

import json
import os

import forked
import pytest


@pytest.mark.slow
def test_the_main_jobs_clm_model_beats_random_init_on_the_probe(tmp_path):
    # the 300-step CLM run (experiment=compare_quick's settings), measured margin 0.052 [+0.026, +0.080]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    out = forked.run(
        [
            "selfsup-train",
            "objective=clm",
            "trainer.max_steps=300",
            "trainer.val_check_interval=100",
            "optim.warmup_steps=30",
            "optim.lr=2e-3",
            "logger=csv",
            "trainer.progress_bar=false",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    evaluated = json.loads((tmp_path / "run" / "summary.json").read_text())["eval"]
    margin = evaluated["eval/probe/accuracy"] - evaluated["eval/probe/random_init_accuracy"]
    assert margin >= 0.03, evaluated
    assert evaluated["eval/probe/majority_accuracy"] == pytest.approx(0.5, abs=0.01)
