"""selfsup.common.names: RunSummary, the one reader and writer of summary.json, and override_key."""

import json
import math

from selfsup.common.names import ERROR, SUMMARY, RunSummary, override_key


def test_a_summary_is_written_as_strict_json_and_read_back(tmp_path):
    (tmp_path / ERROR).write_text("error: an earlier failure\n")
    RunSummary(
        {"status": "finished", "val_loss": math.nan, "eval": {"eval/fixed/loss": math.inf, "n": [1.5, -math.inf]}}
    ).write(tmp_path)
    assert json.loads((tmp_path / SUMMARY).read_text()) == {
        "status": "finished",
        "val_loss": None,
        "eval": {"eval/fixed/loss": None, "n": [1.5, None]},
    }
    assert not (tmp_path / ERROR).exists()  # a finished run's stale error goes
    read = RunSummary.read(tmp_path)
    assert (read.found, read.problem, read.values["eval"]["n"]) == (True, None, [1.5, None])
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_failed_run_keeps_its_error_file(tmp_path):
    (tmp_path / ERROR).write_text("error: x\n")
    RunSummary({"status": "failed"}).write(tmp_path)
    assert (tmp_path / ERROR).read_text() == "error: x\n"


def test_a_missing_torn_or_foreign_summary_is_read_without_raising(tmp_path):
    assert RunSummary.read(tmp_path) == RunSummary(values={}, found=False, problem=None)
    assert RunSummary.read(None).found is False
    (tmp_path / SUMMARY).write_text('{"status": "fini')
    torn = RunSummary.read(tmp_path)
    assert (torn.found, torn.values) == (True, {}) and torn.problem.startswith("Unterminated string")
    (tmp_path / SUMMARY).write_bytes(b"\xff\xfe\x00garbage")
    assert "decode" in RunSummary.read(tmp_path).problem
    (tmp_path / SUMMARY).write_text("[1, 2]")
    assert RunSummary.read(tmp_path).problem == "a JSON list, not an object"


def test_a_summary_that_cannot_be_written_leaves_the_previous_one(tmp_path, caplog):
    RunSummary({"status": "running"}).write(tmp_path)
    RunSummary({"status": "finished"}).write(tmp_path / "no such folder")
    assert "could not write" in caplog.text
    assert RunSummary.read(tmp_path).values == {"status": "running"}


def test_override_key_is_the_key_a_hydra_override_sets():
    assert [override_key(o) for o in ("seed=1", "+trainer.max_steps=3", "++a.b=x=y", "~eval.tasks")] == [
        "seed",
        "trainer.max_steps",
        "a.b",
        "eval.tasks",
    ]
