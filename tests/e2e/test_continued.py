"""init.from=RUN_DIR: continued pretraining from a finished lab run (selfsup.run.continued): same family and
decoder -> encoder, the lineage in summary.json, the console, offline W&B and the verdict, budgets that count the
chain, and one-line refusals of what does not fit."""

import json
import math
import os
import shutil

import forked
import pytest
import torch
from conftest import wandb_run_record
from helpers import train_config
from omegaconf import open_dict

from selfsup.errors import UserError
from selfsup.reliability.checkpoints import load_checkpoint_safely
from selfsup.results.groups import groups_of, setting_label
from selfsup.results.verdict import held_equal
from selfsup.run.build import build, with_init
from selfsup.run.run_dir import merged_config
from selfsup.run.settings import RunSettings

QUICK = ["debug=tiny", "eval=none"]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}  # no key: W&B offline


def selfsup_train(*args):
    return forked.run(["selfsup-train", *args], capture_output=True, text=True, env=ENV, timeout=600)


@pytest.fixture(scope="module")
def parent(cache_dir, tmp_path_factory):
    """A finished CLM run that logged its model to W&B (offline)."""
    run = tmp_path_factory.mktemp("continued") / "clm"
    out = selfsup_train(
        *QUICK, "objective=clm", f"data.cache_dir={cache_dir}", f"hydra.run.dir={run}", "logger.log_model=true"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return run


def summary_of(run):
    return json.loads((run / "summary.json").read_text())


def model_artifacts(run):
    [offline] = (run / "wandb").glob("offline-run-*")
    out = forked.run(["wandb", "leet", "inspect", "--json", str(offline)], capture_output=True, text=True, timeout=120)
    records = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    return [r["artifact"] for r in records if r.get("type") == "artifact" and r["artifact"]["type"] == "model"]


def child_run(parent, cache_dir, *overrides):
    cfg = train_config(*QUICK, f"init.from={parent}", f"data.cache_dir={cache_dir}", *overrides)
    with open_dict(cfg):
        cfg = with_init(cfg)
    return build(RunSettings.of(cfg))


def test_a_decoder_continues_as_an_encoder_with_its_lineage_and_a_budget_that_counts_the_chain(
    parent, cache_dir, tmp_path
):
    """clm -> mlm with trainer.max_flops at 1.25 times what the parent spent: the child stops once the chain reaches
    it (before its max_steps), and says where it came from in summary.json, the console and offline W&B."""
    spent = summary_of(parent)["flops_seen"]
    run = tmp_path / "mlm"
    out = selfsup_train(
        *QUICK,
        "objective=mlm",
        f"init.from={parent}",
        f"trainer.max_flops={spent * 1.25}",
        f"data.cache_dir={cache_dir}",
        f"hydra.run.dir={run}",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    first, child = summary_of(parent), summary_of(run)
    assert (child["objective"], child["architecture"], child["status"]) == ("mlm", "encoder", "finished")
    assert child["init_from"] == str(parent.resolve())
    assert child["parent"] == {
        "run_dir": str(parent.resolve()),
        "objective": "clm",
        "architecture": "decoder",
        "steps": 6,
        "chain_flops_seen": first["flops_seen"],
        "chain_tokens_seen": first["tokens_seen"],
        "chain_steps": 6,
        "chain": "clm 6",
    }
    steps, per_step = child["steps"], child["flops_seen"] / child["steps"]
    assert steps == math.ceil(spent * 0.25 / per_step) < 6  # the budget's remainder, not trainer.max_steps
    assert child["chain"] == f"clm 6 → mlm {steps}" and child["chain_steps"] == 6 + steps
    assert (
        child["chain_flops_seen"] == pytest.approx(spent + child["flops_seen"])
        and child["chain_flops_seen"] >= spent * 1.25
    )
    assert child["chain_tokens_seen"] == first["tokens_seen"] + child["tokens_seen"]
    assert f"continued from {parent}: clm 6 → mlm {steps} ({6 + steps} steps, " in out.stdout
    # W&B: the run uses the parent's model artifact (the same files, so the same digest: the version the parent
    # logged), recorded offline as W&B records a draft artifact that use_artifact takes, for `wandb sync`
    [logged] = model_artifacts(parent)
    [used] = model_artifacts(run)
    assert used["name"] == logged["name"] == f"model-{wandb_run_record(parent)['run_id']}"
    assert used["digest"] == logged["digest"] and used["use_after_commit"] and not logged.get("use_after_commit")
    assert json.loads(used["metadata"])["chain"] == "clm 6"
    # its recorded config reads back (selfsup-eval, the report) without the parent: its own checkpoint holds its shape
    copy = tmp_path / "copied"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("wandb"))
    recorded = (copy / ".hydra" / "config.yaml").read_text().replace(str(parent), str(tmp_path / "gone"))
    (copy / ".hydra" / "config.yaml").write_text(recorded)
    settings = RunSettings.of(merged_config(copy, []))
    assert settings.family == "encoder" and settings.architecture["d_model"] == 32


@pytest.mark.parametrize("objective,stack", [("clm", "decoder"), ("mlm", "encoder")])
def test_the_run_starts_from_the_parents_last_weights(parent, cache_dir, objective, stack):
    """Same family: the weights as they are; an encoder from a decoder: the same tensors in its one stack."""
    run = child_run(parent, cache_dir, f"objective={objective}")
    saved = load_checkpoint_safely(parent / "checkpoints" / "last.ckpt")["state_dict"]
    weights = {k.removeprefix("model.").replace("decoder.", f"{stack}.", 1): v for k, v in saved.items()}
    own = run.model.state_dict()
    assert own.keys() == weights.keys()
    assert all(torch.equal(own[k], weights[k]) for k in own)
    assert run.parent.family == "decoder" and run.module.spent_flops == summary_of(parent)["flops_seen"]


def test_what_does_not_fit_is_refused_in_one_line(parent, cache_dir, tmp_path):
    out = selfsup_train(
        *QUICK,
        "objective=span_corruption",
        f"init.from={parent}",
        f"data.cache_dir={cache_dir}",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert (
        f"error: init.from={parent.resolve()} is a decoder run (clm), objective=span_corruption trains a " in out.stderr
    )
    assert not (tmp_path / "run").exists()
    spent = summary_of(parent)["flops_seen"]
    with pytest.raises(UserError, match=r"spent .* training FLOPs already, trainer.max_flops=.* leaves none"):
        child_run(parent, cache_dir, "objective=clm", f"trainer.max_flops={spent}")
    with pytest.raises(UserError, match=r"another tokenizer \(data.vocab_size=512 there, 600 here\).*parent's data"):
        child_run(parent, cache_dir, "objective=mlm", "data.vocab_size=600")
    unfinished = tmp_path / "unfinished"
    shutil.copytree(parent, unfinished, ignore=shutil.ignore_patterns("wandb", "summary.json"))
    with pytest.raises(UserError, match="has no readable summary.json"):
        child_run(unfinished, cache_dir, "objective=mlm")
    (unfinished / "checkpoints" / "last.ckpt").unlink()
    shutil.copy(parent / "summary.json", unfinished)
    with pytest.raises(UserError, match=r"did not finish \(status finished, no checkpoints/last.ckpt\)"):
        child_run(unfinished, cache_dir, "objective=mlm")
    with pytest.raises(UserError, match="names a job of a sweep: use it in a sweep"):
        child_run('"sweep:arm=clm_half"', cache_dir, "objective=mlm")  # (quoted: Hydra reads = as an override's)


def test_a_sweep_whose_chain_has_no_earlier_stage_is_refused_before_any_job(cache_dir, tmp_path):
    out = selfsup_train(
        "-m",
        *QUICK,
        "arm=clm_then_mlm",
        "seed=0,1",
        f"data.cache_dir={cache_dir}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    )
    assert out.returncode == 2 and not (tmp_path / "sweep").exists()
    assert "init.from=sweep:arm=clm_half: no earlier job of this sweep runs arm=clm_half: list it before" in out.stderr


def test_a_chain_is_one_arm_of_the_verdict_and_its_first_stage_is_not_an_arm():
    def row(run_dir, objective, steps, **more):
        return dict(run_dir=run_dir, objective=objective, steps=steps, tokens_seen=100.0 * steps, status="finished",
                    eval={"x": 1.0}, swept={"seed": 0, "arm": run_dir}, **more)  # fmt: skip

    stage = row("/s/3", "clm", 300)
    chain = row(
        "/s/5", "mlm", 300, chain="clm 300 → mlm 300", chain_steps=600, chain_tokens_seen=60000.0,
        parent={"run_dir": "/s/3", "chain": "clm 300"},
    )  # fmt: skip
    whole = row("/s/0", "mlm", 600)
    assert setting_label(chain) == "clm 300 → mlm 300" and setting_label(whole) == "mlm"
    assert [g.label for g in groups_of([whole, stage, chain])] == ["mlm", "clm 300 → mlm 300"]
    assert held_equal([whole, chain]) == "held equal: 600 steps, 60k tokens"


# experiment=compare_continued end to end at debug=tiny (7 runs, ~40 s); the default suite: each piece above
@pytest.mark.slow
def test_compare_continued_reports_each_chain_as_one_arm_and_a_chain_resumes(cache_dir, tmp_path):
    import html
    import re

    sweep = tmp_path / "sweep"
    out = selfsup_train(
        "experiment=compare_continued",
        "debug=tiny",
        "seed=0",
        f"data.cache_dir={cache_dir}",
        f"hydra.sweep.dir={sweep}",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = {summary_of(sweep / str(j))["swept"]["arm"]: sweep / str(j) for j in range(7)}
    assert list(jobs) == ["mlm", "clm", "gpt_bert", "clm_half", "mlm_half", "clm_then_mlm", "mlm_then_clm"]
    assert summary_of(jobs["clm_then_mlm"])["parent"]["run_dir"] == str(jobs["clm_half"].resolve())
    assert summary_of(jobs["mlm_then_clm"])["chain"] == "mlm 6 → clm 6"
    printed = out.stdout[out.stdout.index("Verdict (margin") : out.stdout.index("Sweep outputs:")]
    assert "clm 6 → mlm 6" in printed and "mlm 6 → clm 6" in printed and "held equal: 6 steps" not in printed
    done = forked.run(
        ["selfsup-report", str(sweep), "--out", str(tmp_path / "r.html")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = html.unescape((tmp_path / "r.html").read_text())
    verdict = re.search(r'<div id="verdict">(.*?)</div>', text, re.S).group(1)
    assert "clm 6 → mlm 6" in verdict and "clm_half" not in verdict
    # a continued job of a sweep resumes: its sweep:arm=clm_half is found again from its own records
    resumed = selfsup_train(f"resume={jobs['clm_then_mlm']}", "trainer.max_steps=8")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    again = summary_of(jobs["clm_then_mlm"])
    assert again["steps"] == 8 and again["chain"] == "clm 6 → mlm 8"
