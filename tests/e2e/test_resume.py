"""Exact resume: a run stopped after N steps and resumed to 2N equals a run of 2N steps, bitwise (its mask rate on a
schedule over the 2N steps)."""

import csv


def losses(run_dir, csv_file="csv/metrics.csv", key="train/loss"):
    rows = csv.DictReader(open(run_dir / csv_file))
    return {int(r["step"]): r[key] for r in rows if r.get(key)}


def test_resume_run_dir_continues_bitwise(train, tmp_path):
    settings = [
        "objective=mlm",
        "objective.mask_rate=0.4",
        "objective.schedule={shape: linear, end: 0.2, steps: 8}",
        "optim.lr_decay_steps=8",
        "trainer.checkpoint_every_n_steps=4",
        "trainer.val_check_interval=4",
        "data.shard_chars=200000",
        "debug=tiny",
        "eval=none",  # what is compared is training; the evaluation of a resumed run: tests/test_reliability.py
    ]  # the corpus in 7 shards
    straight = train(*settings, "trainer.max_steps=8", run_dir=tmp_path / "straight", tiny=False)
    assert straight.returncode == 0, straight.stderr[-2000:]
    first = train(*settings, "trainer.max_steps=4", run_dir=tmp_path / "stopped", tiny=False)
    assert first.returncode == 0, first.stderr[-2000:]
    resumed = train(
        "resume=" + str(tmp_path / "stopped"), "trainer.max_steps=8", run_dir=tmp_path / "stopped", tiny=False
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    expected = losses(tmp_path / "straight")
    got = {**losses(tmp_path / "stopped"), **losses(tmp_path / "stopped", "csv/resume-1/metrics.csv")}
    assert len(expected) == 8 and got == expected  # same strings: bitwise-equal float32 losses
    # the mask rate logged at each step: 0.4 -> 0.2 over the 8 steps, the same across the resume
    rates = {
        **losses(tmp_path / "stopped", key="train/mask_rate"),
        **losses(tmp_path / "stopped", "csv/resume-1/metrics.csv", "train/mask_rate"),
    }
    assert rates == losses(tmp_path / "straight", key="train/mask_rate")
    assert [round(float(rates[k]), 6) for k in range(8)] == [round(0.4 - 0.025 * k, 6) for k in range(8)]
    # the resumed run continues the same W&B run: both offline segments carry the id kept in the run dir
    stopped = tmp_path / "stopped"
    run_id = (stopped / "wandb-run-id").read_text().strip()
    segments = sorted((stopped / "wandb").glob("offline-run-*"))
    assert len(segments) == 2 and all(s.name.endswith(run_id) for s in segments)
    assert (stopped / ".hydra" / "config.yaml").read_text().count("max_steps: 4") == 1  # the original config kept
    assert list((stopped / ".hydra").glob("resume-*/overrides.yaml"))  # and the resume recorded beside it
    # the best checkpoint carried across the resume: one best file, the one the summary names
    import json

    [best] = (stopped / "checkpoints").glob("best-*.ckpt")
    assert json.loads((stopped / "summary.json").read_text())["best_checkpoint"] == str(best)
