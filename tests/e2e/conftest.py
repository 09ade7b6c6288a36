"""End-to-end helpers: run `selfsup-train` as a user would, with tiny settings, W&B offline."""

import json
import os
from pathlib import Path

import forked
import pytest

TINY = ["debug=tiny", "eval.tasks.probe.max_train_examples=400", "eval.tasks.probe.max_test_examples=200"]


@pytest.fixture
def train(cache_dir, tmp_path):
    """train(*overrides, multirun=False) -> CompletedProcess; runs land under tmp_path."""

    def run(*overrides: str, multirun: bool = False, run_dir: Path | None = None, tiny: bool = True, env=None):
        where = (
            [f"hydra.sweep.dir={tmp_path / 'multirun'}"]
            if multirun
            else [f"hydra.run.dir={run_dir or tmp_path / 'run'}"]
        )
        args = [
            "selfsup-train",
            *(["-m"] if multirun else []),
            *(TINY if tiny else []),
            f"data.cache_dir={cache_dir}",
            *where,
            *overrides,
        ]
        environment = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
        environment.update(env or {})
        return forked.run(args, capture_output=True, text=True, env=environment, timeout=600)

    return run


def wandb_summary(run_dir: Path, offline: Path | None = None) -> dict:
    """What W&B recorded, read back from the offline run files (of one of them: `offline`) with wandb's own
    inspector."""
    if offline is None:
        [offline] = list((run_dir / "wandb").glob("offline-run-*"))
    out = forked.run(
        ["wandb", "leet", "inspect", "--summary", "--json", str(offline)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wandb_history(run_dir: Path) -> list[dict]:
    [offline] = list((run_dir / "wandb").glob("offline-run-*"))
    out = forked.run(
        ["wandb", "leet", "inspect", "--json", str(offline)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    records = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return [r["history"]["item"] for r in records if r.get("type") == "history"]


def wandb_run_record(run_dir: Path, offline: Path | None = None) -> dict:
    """The run record (name, group, tags, id) of the offline run files (of one of them: `offline`)."""
    if offline is None:
        [offline] = list((run_dir / "wandb").glob("offline-run-*"))
    out = forked.run(
        ["wandb", "leet", "inspect", "--json", str(offline)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    for line in out.stdout.splitlines():
        record = json.loads(line)
        if record.get("type") == "run":
            return record["run"]
    raise AssertionError(f"no run record in {offline}")
