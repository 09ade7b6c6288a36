"""init.from=<transformers folder>: a run starts from a GPT-2 or T5 checkpoint made by transformers, with its
architecture and tokenizer, and reports at step 0 the validation loss transformers computes on the same batches."""

import csv
import json
import math

import pytest
import torch
from helpers import hf_checkpoint
from hydra import compose, initialize_config_dir
from omegaconf import open_dict

from selfsup.data import text_file_documents
from selfsup.data.vocab import special_tokens
from selfsup.run.build import build, with_init
from selfsup.run.cli import CONF_DIR
from selfsup.run.schema import register
from selfsup.run.settings import RunSettings

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from helpers import write_corpus

    folder = write_corpus(tmp_path_factory.mktemp("init") / "corpus", n_files=3, docs_per_file=80)
    return folder, list(text_file_documents([folder]))


def transformers_loss(hf, run, old, limit: int) -> float:
    """What transformers computes on the run's first `limit` validation batches (the same masks as the run's), each
    token id taken back to the checkpoint's tokenizer by its string."""
    new = run.data.corpus.tokenizer
    back = torch.tensor([old.token_to_id(new.id_to_token(i)) for i in range(new.get_vocab_size())])
    run.data.setup("validate")
    nll, count = 0.0, 0
    for i, tokens in zip(range(limit), run.data.val_dataloader()):
        batch = run.objective(tokens, run.module.generator("val", i))
        assert batch.encoder_mask is None or bool(batch.encoder_mask.all())
        scored = batch.targets != -100
        with torch.no_grad():
            if batch.encoder_inputs is None:
                logits = hf(input_ids=back[batch.decoder_inputs]).logits
            else:
                logits = hf(input_ids=back[batch.encoder_inputs], decoder_input_ids=back[batch.decoder_inputs]).logits
        targets = back[batch.targets.clamp(min=0)]
        nll -= float(torch.log_softmax(logits.double(), -1).gather(-1, targets[..., None])[..., 0][scored].sum())
        count += int(scored.sum())
    return nll / count


# a transformers checkpoint trained from (~13 s); the default suite: tests/test_hf_import.py loads each kind in-process
@pytest.mark.slow
@pytest.mark.parametrize(
    "kind,objective",
    # T5 (untied head, decoding from <pad>'s rows, relative positions) is slow: the suite's time; its rows are
    # checked in tests/test_hf_import.py, and its export taken back in below
    [("gpt2", "clm"), pytest.param("t5", "span_corruption", marks=pytest.mark.slow)],
)
def test_a_run_from_a_checkpoint_starts_at_the_checkpoints_own_loss(
    kind, objective, corpus, train, cache_dir, tmp_path
):
    folder = hf_checkpoint(kind, tmp_path / kind, corpus[1], roles=special_tokens(100))
    overrides = [
        f"objective={objective}",
        f"init.from={folder}",
        "data=text_files",
        f"data.paths=[{corpus[0]}]",
        "logger=csv",
    ]
    exam = ["eval=tiny", "eval.pairs=null", "eval.tasks=null"]  # the fixed exam alone: evaluated at step 0 too
    out = train(*overrides, *exam, "debug=tiny", "trainer.max_steps=3", tiny=False)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = tmp_path / "run"
    summary = json.loads((run_dir / "summary.json").read_text())
    start, end = summary["start_eval"]["eval/fixed/loss"], summary["eval"]["eval/fixed/loss"]
    assert math.isfinite(start) and start != end  # the starting model's score, and the trained one's
    assert summary["status"] == "finished" and summary["steps"] == 3 and summary["init_from"] == str(folder)
    assert summary["architecture_preset"] == {"gpt2": "decoder", "t5": "t5"}[kind]
    assert "at step 0 " in out.stdout
    with open(run_dir / "csv" / "metrics.csv", newline="") as f:  # the first point of the val curve: step 0
        first = next(row for row in csv.DictReader(f) if row["val/loss"])
    assert float(first["step"]) == 0 and float(first["val/loss"]) == pytest.approx(summary["start_val_loss"])
    assert [line for line in out.stderr.splitlines() if not line.startswith("prepared ")] == []  # no warning
    # a resume reads the checkpoint's settings again (its checkpoint holds them) and continues, not from step 0
    out = train(f"resume={run_dir}", "trainer.max_steps=6", *exam, tiny=False, run_dir=run_dir)
    assert out.returncode == 0, out.stderr[-3000:]
    resumed = json.loads((run_dir / "summary.json").read_text())
    assert resumed["steps"] == 6 and "start_val_loss" not in resumed
    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose("train", overrides=[*overrides, "debug=tiny", "eval=none", f"data.cache_dir={cache_dir}"])
    with open_dict(cfg):
        cfg = with_init(cfg)
    run = build(RunSettings.of(cfg))
    hf = getattr(transformers, "GPT2LMHeadModel" if kind == "gpt2" else "T5ForConditionalGeneration")
    hf = hf.from_pretrained(folder).eval()
    from selfsup.data.pretrained_tokenizer import load_pretrained

    expected = transformers_loss(hf, run, load_pretrained(str(folder)), limit=cfg.trainer.limit_val_batches)
    assert summary["start_val_loss"] == pytest.approx(expected, rel=1e-5, abs=1e-5)
    # the run's checkpoints record the checkpoint's settings: the model comes back as it was trained
    stored = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["selfsup"]["config"]["architecture"]
    assert stored["n_layers"] == 2 and stored["d_model"] == 32 and stored["name"] == run.model.config.name


@pytest.fixture(scope="module")
def gpt2(corpus, tmp_path_factory):
    return hf_checkpoint("gpt2", tmp_path_factory.mktemp("gpt2") / "gpt2", corpus[1])


@pytest.mark.parametrize(
    "overrides,words",
    [
        (["data.tokenizer=t5.json"], "brings its own tokenizer, data.tokenizer=t5.json another: drop data.tokenizer"),
        (["objective=mlm"], "is architecture=decoder: objective=mlm cannot train architecture=decoder"),
        (["objective=clm", "data.seq_len=100"], "has 64 positions, this run's sequences take 100: set data.seq_len=64"),
        (
            ["objective=clm", "init.from=/nowhere/gpt2"],
            "init.from=/nowhere/gpt2 does not exist: pass a lab run dir, a transformers",
        ),
        (["objective=clm", "init.from={weights}"], "has no tokenizer.json: save the model and its fast tokenizer in"),
        (["objective=clm", "init.from=nobody/no-model"], "init.from=nobody/no-model is not in the local Hugging Fac"),
        (["objective=clm", "init.form=gpt2"], "Key 'form' is not in struct"),
        (["objective=clm", "init.from={more_tokens}"], "tokens, its embedding"),
        (["objective=clm", "init.from={truncated}"], "its weights cannot be read (Error while deserializing header"),
        (["objective=clm", "init.from={empty}"], "its weights cannot be read ("),
        (
            ["objective=clm", "init.from={nan}"],
            "(GPT2LMHeadModel): its transformer.h.0.mlp.c_fc.weight holds NaN or inf",
        ),
    ],
)
def test_a_checkpoint_a_run_cannot_start_from_is_refused_in_one_line(overrides, words, gpt2, tmp_path, monkeypatch):
    from huggingface_hub import constants
    from hydra.errors import HydraException

    from selfsup.errors import UserError
    from selfsup.run.build import check_objective, check_settings
    from selfsup.run.checks import config_error_line

    weights = tmp_path / "weights"
    weights.mkdir()
    for name in ("config.json", "model.safetensors"):
        (weights / name).write_bytes((gpt2 / name).read_bytes())
    folders = {"weights": weights, **damaged_copies(gpt2, tmp_path)}
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # a hub name: its local cache only (HF_HUB_OFFLINE=1)
    register()
    try:
        with initialize_config_dir(str(CONF_DIR), version_base=None):
            cfg = compose("train", overrides=[f"init.from={gpt2}", *(o.format(**folders) for o in overrides)])
        cfg = with_init(cfg)
        check_settings(cfg)
        check_objective(cfg)
        message = None
    except HydraException as err:
        message = config_error_line(err)
    except UserError as err:
        message = str(err)
    assert message is not None and words in message and "\n" not in message, message


def damaged_copies(gpt2, tmp_path) -> dict:
    """Copies of the checkpoint as a crash, a full disk or a wrong save leaves them: more_tokens (a tokenizer of
    50 tokens more than the embedding's rows), truncated and empty weights, nan (a NaN in one weight)."""
    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer

    made = {}
    for name in ("more_tokens", "truncated", "empty", "nan"):
        made[name] = tmp_path / name
        made[name].mkdir()
        for file in ("config.json", "model.safetensors", "tokenizer.json"):
            (made[name] / file).write_bytes((gpt2 / file).read_bytes())
    tokenizer = Tokenizer.from_file(str(gpt2 / "tokenizer.json"))
    tokenizer.add_tokens([f"extra{i}" for i in range(50)])
    tokenizer.save(str(made["more_tokens"] / "tokenizer.json"))
    weights = (gpt2 / "model.safetensors").read_bytes()
    (made["truncated"] / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    (made["empty"] / "model.safetensors").write_bytes(b"")
    state = load_file(str(gpt2 / "model.safetensors"))
    state["transformer.h.0.mlp.c_fc.weight"][0, 0] = float("nan")
    save_file(state, str(made["nan"] / "model.safetensors"), metadata={"format": "pt"})
    return made


@pytest.mark.slow  # the guard that refuses every bad setting before writing (tests/e2e/test_bad_input.py)
def test_the_command_line_refuses_it_before_writing_anything(gpt2, train, tmp_path):
    out = train(f"init.from={gpt2}", "objective=clm", "data.seq_len=100", "debug=tiny", tiny=False)
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        f"error: init.from={gpt2} has 64 positions, this run's sequences take 100: set data.seq_len=64 or less"
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # two runs and an export per architecture (the model-level round trip: tests/test_hf_import.py)
@pytest.mark.parametrize(
    "objective,architecture",
    [("mlm", "encoder"), ("clm", "decoder"), ("span_corruption", "encoder_decoder"), ("span_corruption", "t5")],
)
def test_a_run_exported_and_taken_back_in_starts_at_the_loss_it_ended_with(objective, architecture, train, tmp_path):
    """selfsup-export, then init.from= the export: the tokenizer comes back in the same layout (no row moves), the
    weights bit for bit, so the new run's step-0 validation is the first run's last one (same data, same masks)."""
    from selfsup.interop.export import export

    settings = [f"objective={objective}", f"architecture={architecture}", "eval=none", "logger=csv"]
    out = train(*settings, "debug=tiny", tiny=False, run_dir=tmp_path / "first")
    assert out.returncode == 0, out.stderr[-3000:]
    export(tmp_path / "first" / "checkpoints" / "last.ckpt", tmp_path / "hf")
    out = train(*settings, "debug=tiny", f"init.from={tmp_path / 'hf'}", tiny=False, run_dir=tmp_path / "second")
    assert out.returncode == 0, out.stderr[-3000:]
    first, second = (json.loads((tmp_path / r / "summary.json").read_text()) for r in ("first", "second"))
    assert second["architecture_preset"] == first["architecture_preset"] == architecture
    assert second["start_val_loss"] == pytest.approx(first["val_loss"], rel=1e-5)


def test_a_sweep_checks_each_job_with_its_checkpoints_settings(gpt2, capsys):
    """selfsup.run.sweep.check_jobs (before any job runs): a job whose objective cannot train the checkpoint refuses
    the sweep in one line naming the job."""
    from selfsup.run.sweep import check_jobs

    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None), pytest.raises(SystemExit) as done:
        check_jobs([[f"init.from={gpt2}", "data.seq_len=64", f"objective={o}"] for o in ("clm", "mlm")])
    assert done.value.code == 2
    assert capsys.readouterr().err.startswith(
        f"error: job 1 of 2 (init.from={gpt2} data.seq_len=64 objective=mlm): init.from={gpt2} is architecture=decoder"
    )
