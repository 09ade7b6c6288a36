"""Scale: DDP over 2 CPU processes under Hydra (one W&B run per job, no stray dirs), bf16, compile."""

import json
import os

import forked
import pytest
from conftest import TINY, wandb_run_record, wandb_summary

# an encoder and an encoder-decoder in the default run; the other objectives run in the slow set
OBJECTIVES = ["mlm", "span_corruption"]


@pytest.fixture(scope="module")
def ddp_sweep(cache_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp")
    cwd = tmp_path_factory.mktemp("cwd")  # relative outputs/ of any stray Hydra run would land here
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    out = forked.run(
        [
            "selfsup-train",
            "-m",
            "trainer=ddp_cpu",
            *TINY,
            f"data.cache_dir={cache_dir}",
            f"hydra.sweep.dir={root}",
            "objective=" + ",".join(OBJECTIVES),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return root, cwd, out


# two-process DDP sweeps (~35 s); the default suite: tests/test_distributed.py starts DDP ranks from the resolved config
@pytest.mark.slow
def test_ddp_multirun_gives_one_wandb_run_per_job_and_no_stray_dirs(ddp_sweep):
    root, cwd, out = ddp_sweep
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == [str(i) for i in range(len(OBJECTIVES))]
    assert not any(cwd.iterdir())  # no rank wrote an outputs/ dir of its own
    run_ids = set()
    for job, objective in enumerate(OBJECTIVES):
        run = root / str(job)
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["objective"] == objective
        assert summary["world_size"] == 2 and summary["global_batch_size"] == 2 * summary["batch_size_per_device"]
        assert len(list((run / "wandb").glob("offline-run-*"))) == 1
        record = wandb_run_record(run)
        run_ids.add(record["run_id"])
        recorded = wandb_summary(run)
        assert recorded["state"] == "finished"
        assert recorded["config"]["global_batch_size"] == 16 and recorded["config"]["batch_size_per_device"] == 8
        assert recorded["summary"]["train/tokens_seen"] == summary["tokens_seen"]  # logged from rank 0
    assert len(run_ids) == len(OBJECTIVES)
    assert out.stdout.count("[job ") == len(OBJECTIVES)  # one sweep, not one per rank


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["prefix_lm", "ul2"])
def test_ddp_other_objectives(train, objective, tmp_path):
    out = train("trainer=ddp_cpu", f"objective={objective}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["world_size"] == 2


@pytest.mark.slow  # the DDP sweep above
def test_ddp_tokens_seen_counts_every_rank(ddp_sweep):
    root, _, _ = ddp_sweep
    summary = json.loads((root / "0" / "summary.json").read_text())  # mlm: windows of 32 tokens
    assert summary["tokens_seen"] == 6 * 2 * 8 * 32


@pytest.mark.slow
def test_compile_option_runs(train):
    out = train("objective=clm", "trainer.compile=true")
    assert out.returncode == 0, out.stderr[-3000:]


@pytest.mark.slow
def test_compiled_shape_sweep_compiles_every_job(train):
    # the jobs of one -m process share Dynamo's caches: without a reset per job, 5 model sizes x
    # (train + val graphs) reached its recompile limit and the last jobs ran eagerly
    out = train(
        "objective=mlm",
        "architecture.d_model=32,48,64,96,128",
        "trainer.compile=true",
        multirun=True,
        env={"TORCH_LOGS": "recompiles"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "recompile_limit" not in out.stderr, out.stderr[-3000:]
    assert out.stderr.count("Recompiling function") <= 2 * 5  # validation graph, last partial batch: per job


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_gpu_preset_on_a_machine_without_gpu_is_one_clear_line(cache_dir):
    from test_bad_input import refusal

    message = refusal(cache_dir, "trainer=fsdp")
    assert "no usable GPU" in message and "trainer=cpu" in message


@pytest.mark.slow  # two CPU processes (~16 s); the DDP multirun above runs by default
def test_fsdp_on_two_cpu_processes_matches_ddp_step_for_step(ddp_sweep, train, tmp_path):
    # FSDP2 (sharded parameters, gradients, optimizer state) must train exactly like DDP
    out = train(
        "trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=2", "trainer.precision=32-true", "objective=mlm"
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["world_size"] == 2
    assert len(list((run / "wandb").glob("offline-run-*"))) == 1 and wandb_summary(run)["state"] == "finished"
    fsdp, ddp = train_losses(run), train_losses(ddp_sweep[0] / "0")  # job 0 of the DDP sweep: mlm, same settings
    assert len(fsdp) == 6 and fsdp.keys() == ddp.keys()
    for step in fsdp:
        assert fsdp[step] == pytest.approx(ddp[step], rel=1e-5), step
    import torch

    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)  # one file with the full weights
    assert state["state_dict"]["model.tok_emb.weight"].shape[1] == 32


def train_losses(run) -> dict[int, float]:
    import csv

    rows = csv.DictReader((run / "csv" / "metrics.csv").open())
    return {int(r["step"]): float(r["train/loss"]) for r in rows if r.get("train/loss")}


@pytest.mark.slow  # a cluster launcher (~20 s): keeps the default run under 10 minutes
def test_torchrun_ranks_share_one_run_dir_and_one_wandb_run(cache_dir, tmp_path):
    # torchrun starts every rank itself: each runs the Hydra app, all must land in one dir, one W&B run
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    out = forked.run(
        [
            "torchrun",
            "--standalone",
            "--nproc_per_node",
            "2",
            "-m",
            "selfsup.run.cli",
            "trainer=ddp_cpu",
            *TINY,
            f"data.cache_dir={cache_dir}",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    [day] = list((tmp_path / "outputs").iterdir())
    [run] = list(day.iterdir())  # no second dir from rank 1
    assert run.name.startswith("torchrun-")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["world_size"] == 2
    assert len(list((run / "wandb").glob("offline-run-*"))) == 1 and wandb_summary(run)["state"] == "finished"
    assert out.stdout.count("W&B run files:") == 1  # the summary is printed by rank 0 only
