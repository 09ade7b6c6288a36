"""selfsup-train end to end: every objective trains, logs to W&B offline, checkpoints and resumes."""

import csv
import json
import math
import os
import sys
from pathlib import Path

import forked
import numpy as np
import pytest
from conftest import TINY, wandb_history, wandb_run_record, wandb_summary

from selfsup.errors import UserError
from selfsup.evaluation.fixed import panel

OBJECTIVES = {
    "mlm": "encoder",
    "clm": "decoder",
    "span_corruption": "encoder_decoder",
    "prefix_lm": "decoder",
    "bart": "encoder_decoder",
    "fim": "decoder",
    "gpt_bert": "decoder",
}  # UL2, a mixture of the objectives above (tests/objectives): end to end in a slow test below


@pytest.fixture(scope="module")
def sweep(cache_dir, tmp_path_factory):
    """One multirun over all objectives, each with its default architecture."""
    root = tmp_path_factory.mktemp("sweep")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}  # no key: auto -> offline
    out = forked.run(
        [
            "selfsup-train",
            "-m",
            *TINY,
            f"data.cache_dir={cache_dir}",
            f"hydra.sweep.dir={root}",
            "logger.log_model=true",
            "logger.log_export=true",
            "objective=" + ",".join(OBJECTIVES),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
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
    assert math.isfinite(summary["val_loss"]) and summary["val_perplexity"] == pytest.approx(
        math.exp(summary["val_loss"]), rel=1e-4
    )
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
    for key in (
        "train/loss",
        "train/perplexity",
        "train/accuracy",
        "train/signal_per_token",
        "train/tokens_seen",
        "train/targets_seen",
        "train/flops_seen",
        "val/perplexity",
        "val/accuracy",
        "val/signal_per_token",
        "perf/tokens_per_sec",
    ):
        assert key in recorded["summary"], key
    # the comparable evaluation: in the W&B run, the CSV and summary.json alike
    evaluated = summary["eval"]
    encoder_decoder = OBJECTIVES[objective] == "encoder_decoder"
    second = "/denoise" if encoder_decoder else "/mntp" if objective == "gpt_bert" else None  # a second scorer
    pairs = {
        f"eval/pairs{scorer}{kind}/{what}accuracy"
        for scorer in ["", second][: 1 + (second is not None)]
        for kind in ["", "/swap_1", "/replaced_1", "/replaced_4"]
        for what in ["", "random_init_"] + (["unigram_", "bigram_"] if not scorer else [])
    }
    pairs |= {f"{key}_sd" for key in pairs if "random_init" in key}
    pairs |= {
        key.replace("/accuracy", f"/{m}")
        for key in pairs
        if key.endswith("/accuracy")
        for m in ("margin", "margin_low", "margin_high", "margin_examples", "accuracy_se")
    }  # beside each accuracy: its margin,
    # its interval, the test examples it was measured on, its standard error
    split = {"encoder": ["masked", "random", "unchanged"], "encoder_decoder": ["first", "later", "sentinel"]}.get(
        OBJECTIVES[objective], []
    )
    fixed = {
        f"eval/fixed/{kind}/{what}"
        for kind in split
        for what in ("loss", "fraction", "unigram_loss")
        if kind != "sentinel" or what == "loss"
    } or {"eval/fixed/unigram_loss"}  # sentinels: out of the loss
    members = panel(OBJECTIVES[objective])  # the fixed exam's panel: each member's loss beside the mean
    fixed |= {f"eval/fixed/{m}/loss" for m in members} if len(members) > 1 else set()
    # the exam's interval over its windows, and its gap to the unigram on the same targets with its interval
    fixed |= {
        f"eval/fixed/{k}"
        for k in ("loss_low", "loss_high", "loss_se", "unigram_gap", "unigram_gap_low", "unigram_gap_high")
    }
    infilling = (
        {  # decoders: the infilling job, scored as a generation job beside random-init
            f"eval/infilling/{k}"
            for s in ("loss", "exact_match", "token_f1")
            for k in (s, f"{s}_se", f"random_init_{s}", f"random_init_{s}_sd")
            + tuple(f"{s}/margin{e}" for e in ("", "_low", "_high", "_examples"))
        }
        if OBJECTIVES[objective] == "decoder"
        else set()
    )
    heldout = {f"eval/heldout/bits_per_byte{e}" for e in ("", "_low", "_high", "_se")}  # the held-out text
    heldout |= {
        f"eval/heldout/{k}" for k in ("unigram_bits_per_byte", "unigram_gap", "unigram_gap_low", "unigram_gap_high")
    }
    assert set(evaluated) == {
        *fixed,
        *heldout,
        *infilling,
        "eval/fixed/loss",
        "eval/fixed/perplexity",
        "eval/probe/accuracy",
        "eval/probe/macro_f1",
        "eval/probe/random_init_accuracy",
        "eval/probe/random_init_accuracy_sd",
        "eval/probe/random_init_macro_f1",
        "eval/probe/majority_accuracy",
        *(f"eval/probe/{k}{e}" for k in ("tfidf_accuracy", "vs_tfidf") for e in ("", "_low", "_high")),  # the
        # simple baseline (TF-IDF + logistic regression) and the run against it
        "eval/probe/margin",
        "eval/probe/accuracy_se",
        "eval/probe/margin_low",
        "eval/probe/margin_high",
        "eval/probe/margin_examples",
        *pairs,
    }
    assert evaluated["eval/fixed/loss_low"] < evaluated["eval/fixed/loss"] < evaluated["eval/fixed/loss_high"]
    assert recorded["summary"]["eval/fixed/loss_high"] == pytest.approx(evaluated["eval/fixed/loss_high"], rel=1e-6)
    for key in [k for k in evaluated if k.endswith("/margin")]:
        low, high = evaluated[key + "_low"], evaluated[key + "_high"]
        assert low <= evaluated[key] <= high and high - low < 0.5, key
    assert set(summary["pairs_scorers"]) == {"eval/pairs", *([f"eval/pairs{second}"] if second else [])}
    for key, value in evaluated.items():
        assert recorded["summary"][key] == pytest.approx(value, rel=1e-6), key
    # the run's verdict, in summary.json and the W&B summary alike; its per-example outcomes beside it
    assert summary["verdict"].startswith("Verdict (margin over random-init") and "  pairs: " in summary["verdict"]
    assert recorded["summary"]["verdict"] == summary["verdict"]
    with np.load(run / "outcomes.npz") as kept:
        for key in ["eval/pairs", "eval/probe"] + ([f"eval/pairs{second}"] if second else []):
            n = kept[key].shape[0]
            seeds = 2 if key == "eval/probe" else 3  # eval.probe.random_init_seeds, eval.pairs.random_init_seeds
            assert kept[f"{key}|random_init"].shape == (seeds, n) and len(str(kept[f"{key}|examples"])) == 64
            assert kept[key].mean() == pytest.approx(evaluated[f"{key}/accuracy"], abs=1e-7)  # (the probe's: float32)
    assert 0 < evaluated["eval/probe/accuracy"] < 1 and evaluated["eval/fixed/loss"] > 0
    rows = [r for r in csv.DictReader(open(run / "csv" / "metrics.csv")) if r.get("eval/probe/accuracy")]
    assert len(rows) == 1 and float(rows[0]["train/tokens_seen"]) == summary["tokens_seen"]  # after training, once
    assert summary["flops_seen"] == pytest.approx(recorded["summary"]["train/flops_seen"]) and summary["flops_seen"] > 0
    tokens = [row["train/tokens_seen"] for row in wandb_history(run) if "train/loss" in row]
    assert tokens == sorted(tokens) and tokens[-1] == summary["tokens_seen"]


def test_sweep_jobs_share_one_wandb_group_and_print_a_table(sweep, cache_dir):
    root, out = sweep
    runs = [wandb_run_record(root / str(job)) for job in range(len(OBJECTIVES))]
    assert len({r["run_group"] for r in runs}) == 1 and runs[0]["run_group"].startswith("sweep-")
    assert len({r["run_id"] for r in runs}) == len(OBJECTIVES)
    for job, objective in enumerate(OBJECTIVES):
        assert runs[job]["display_name"] == f"{objective}-{OBJECTIVES[objective]}"  # fixed overrides stay out
        assert f"[job {job}] objective={objective}: val loss" in out.stdout
        assert any(line.startswith(f"{job}   | {objective} ") for line in out.stdout.splitlines())  # table row
    assert "val loss" in out.stdout and "signal/token" in out.stdout and "tokens/s" in out.stdout
    assert "fixed loss" in out.stdout and "probe acc" in out.stdout and "pairs acc" in out.stdout
    assert "pairs margin" in out.stdout and "probe margin" in out.stdout and "FLOPs" in out.stdout
    lines = (out.stdout + out.stderr).replace(str(root), "outputs/multirun/2026-12-04/16-00-00").splitlines()
    tables = [line for line in lines if " | " in line or "-+-" in line]
    assert tables and max(map(len, tables)) <= 160  # the console's tables: 160 columns, its prose: 100
    long = [line for line in lines if line not in tables and len(line.expandtabs()) > 100]
    assert not long, long  # Hydra's own lines too (`#0 : objective=... data.cache_dir=...`, wrapped)
    launched = out.stdout.split("#0 : ", 1)[1].split("\n[", 1)[0]  # Hydra's line of job 0, wrapped
    assert f"data.cache_dir={cache_dir}" in launched.replace("\n    ", " ") and "\n    " in launched
    # the sweep's verdict, as printed, is the one kept in verdict.json
    verdict = json.loads((root / "verdict.json").read_text())["verdict"]
    assert verdict.startswith("Verdict (margin over random-init, 95% paired-bootstrap interval; held equal: 6 steps")
    printed = out.stdout[out.stdout.index("Verdict (margin") : out.stdout.index("Sweep outputs:")]
    assert " ".join(printed.split()) == " ".join(verdict.split())


def test_signal_per_token_follows_the_objective(sweep):
    root, _ = sweep
    signal = {
        o: json.loads((root / str(j) / "summary.json").read_text())["signal_per_token"]
        for j, o in enumerate(OBJECTIVES)
    }
    assert signal["clm"] == pytest.approx(32 / 33)  # every token but the first of the window
    assert 0.05 < signal["mlm"] < 0.3  # ~15% of tokens
    assert signal["mlm"] < signal["span_corruption"] < signal["clm"]
    # FIM: a rearranged window reads 30 text tokens and is scored on 32 targets (its sentinels after the first)
    assert 32 / 33 < signal["fim"] < 32 / 30


@pytest.mark.slow  # the default sweep above trains every other objective; UL2 mixes their denoisers
def test_ul2_trains_logs_and_exports_end_to_end(train, tmp_path):
    out = train("objective=ul2", "logger.log_export=true", "logger.log_model=true")
    assert out.returncode == 0, out.stderr[-2000:]
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["status"], summary["objective"], summary["architecture"]) == ("finished", "ul2", "encoder_decoder")
    assert summary["steps"] == 6 and math.isfinite(summary["val_loss"])
    recorded = wandb_summary(run)
    assert recorded["state"] == "finished" and recorded["summary"]["val/loss"] == pytest.approx(summary["val_loss"])
    assert (run / "hf" / "config.json").is_file()


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

    import torch
    from tokenizers import Tokenizer

    root, _ = sweep
    copy = tmp_path / "elsewhere"
    shutil.copytree(root / "1", copy)
    record = torch.load(copy / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")["selfsup"]
    assert (
        Tokenizer.from_str(record["tokenizer"]).to_str() == Tokenizer.from_file(str(copy / "tokenizer.json")).to_str()
    )
    script = (
        "import sys, selfsup; p = selfsup.load(sys.argv[1]); "
        "print(p.architecture, p.config['objective']['name'], p.encode('The module is here'), p.model.training)"
    )
    out = forked.run(
        [sys.executable, "-c", script, str(copy)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-2000:]
    expected = Tokenizer.from_str(record["tokenizer"]).encode("The module is here").ids
    assert out.stdout.split(" ", 2)[:2] == ["decoder", "clm"] and str(expected) in out.stdout
    assert out.stdout.strip().endswith("False")  # eval mode


def test_sample_shows_what_each_architecture_predicts(sweep, capsys):
    import selfsup
    from selfsup.tools.sample import main as sample

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
    sample([str(root / "1"), "--max-new-tokens", "8", "--greedy"])
    assert capsys.readouterr().out.splitlines()[1] == "The module" + greedy
    # BART writes the whole text back, a <mask> for any number of missing words
    bart = selfsup.load(root / "4")
    assert bart.rewrites and not selfsup.load(root / "2").rewrites
    written = bart.reconstruct("The <mask> of the <mask> is", max_new_tokens=8)
    assert written == bart.reconstruct("The <mask> of the <mask> is", max_new_tokens=8) and "<mask>" not in written
    assert len(bart.encode(written)) <= 8
    sample([str(root / "4"), "--max-new-tokens", "8"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("encoder_decoder from ") and lines[1] == "The <mask> of the <mask> is returned."
    assert lines[2] == bart.reconstruct(lines[1], max_new_tokens=8)
    # FIM writes the middle between a prefix and a suffix; its default prompt is in that layout
    fim = selfsup.load(root / "5")
    assert fim.fills_middle and not decoder.fills_middle
    middle = fim.fill_middle("Return the", " of the list.", max_new_tokens=6)
    assert middle == fim.generate("<fim_prefix>Return the<fim_suffix> of the list.<fim_middle>", 6) and middle
    sample([str(root / "5"), "--max-new-tokens", "6", "--greedy"])
    assert (
        capsys.readouterr().out.splitlines()[1]
        == "<fim_prefix>Return the<fim_suffix> of the list.<fim_middle>" + middle
    )
    with pytest.raises(UserError, match="fill_middle needs a decoder trained with objective=fim"):
        decoder.fill_middle("a", "b")


def test_bad_input_to_load_is_one_line(sweep, tmp_path, capsys):
    import torch

    from selfsup.tools.sample import main as sample

    root, _ = sweep
    empty = tmp_path / "run"
    (empty / ".hydra").mkdir(parents=True)
    other = tmp_path / "other.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, other)
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"not a checkpoint")
    cases = [
        (empty, "holds no weights"),
        (other, "is not a selfsup checkpoint"),
        (junk, "is truncated or not a checkpoint"),
        (tmp_path / "nope", "does not exist"),
    ]
    for path, words in cases:
        with pytest.raises(SystemExit) as done:
            sample([str(path)])
        err = capsys.readouterr().err
        assert done.value.code == 2 and err.startswith("error: ") and words in err and len(err.splitlines()) == 1
    import selfsup
    from selfsup.errors import UserError

    with pytest.raises(UserError, match="fill_masks needs a model of architecture encoder; this one is decoder"):
        selfsup.load(root / "1").fill_masks("The <mask>")


def test_log_model_puts_the_checkpoints_and_tokenizer_in_a_wandb_model_artifact(sweep):
    root, _ = sweep
    run = root / "1"
    [offline] = list((run / "wandb").glob("offline-run-*"))
    out = forked.run(
        ["wandb", "leet", "inspect", "--json", str(offline)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    artifacts = [
        json.loads(line)["artifact"]
        for line in out.stdout.splitlines()
        if line.strip() and json.loads(line).get("type") == "artifact"
    ]
    artifact, hf = [a for a in artifacts if a["type"] == "model"]
    assert any(a["type"] == "run_table" for a in artifacts)  # the eval/predictions W&B Table
    record = wandb_run_record(run)
    assert artifact["name"] == f"model-{record['run_id']}" and artifact["type"] == "model"
    assert artifact["aliases"] == ["latest"]
    files = {entry["path"] for entry in artifact["manifest"]["contents"]}
    summary = json.loads((run / "summary.json").read_text())
    assert files == {Path(summary["best_checkpoint"]).name, "last.ckpt", "tokenizer.json"}
    exported = {entry["path"] for entry in hf["manifest"]["contents"]}  # logger.log_export: the transformers folder
    assert hf["name"] == f"hf-{record['run_id']}" and hf["type"] == "model"
    assert exported == {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
    assert exported == {p.name for p in (run / "hf").iterdir()}
    metadata = artifact["metadata"] if isinstance(artifact["metadata"], dict) else json.loads(artifact["metadata"])
    assert metadata["config"]["objective"]["name"] == "clm" and metadata["steps"] == 6
    assert metadata["val_loss"] == pytest.approx(summary["val_loss"])


# ---------------------------------------------------------------- the export to transformers (selfsup-export)
SENTENCE = "The module returns a dictionary of the files in the folder."


def lab_logits(p, ids, decoder_ids=None):
    import torch

    with torch.no_grad():
        if p.architecture == "decoder":
            hidden = p.model(decoder_inputs=ids)
        else:
            hidden = p.model(encoder_inputs=ids, decoder_inputs=decoder_ids)
        return hidden, p.model.head(hidden)[..., : p.vocab.size]


def hf_logits(folder, p, ids, decoder_ids=None):
    import torch
    import transformers

    auto = {
        "decoder": transformers.AutoModelForCausalLM,
        "encoder": transformers.AutoModelForMaskedLM,
        "encoder_decoder": transformers.AutoModelForSeq2SeqLM,
    }[p.architecture]
    model = auto.from_pretrained(folder).eval()
    with torch.no_grad():
        if p.architecture == "encoder_decoder":
            return model, model(input_ids=ids, decoder_input_ids=decoder_ids).logits
        return model, model(ids).logits


@pytest.mark.parametrize("job", [1, 2, 3, 4])  # clm and prefix_lm decoders, span corruption and bart encoder-decoders
def test_exported_decoders_and_encoder_decoders_give_the_labs_logits(sweep, job):
    """logger.log_export wrote <run>/hf; transformers loads it (GPT-2, Blenderbot) and computes the same logits."""
    import torch

    import selfsup

    root, _ = sweep
    p = selfsup.load(root / str(job))
    ids = torch.tensor([p.encode(SENTENCE)])
    encoder_decoder = p.architecture == "encoder_decoder"
    decoder_ids = torch.tensor([[p.vocab.bos_id, *p.encode("a dictionary")]]) if encoder_decoder else None
    _, expected = lab_logits(p, ids, decoder_ids)
    model, logits = hf_logits(root / str(job) / "hf", p, ids, decoder_ids)
    assert type(model).__name__ == ("BlenderbotForConditionalGeneration" if encoder_decoder else "GPT2LMHeadModel")
    assert logits.shape == expected.shape and (logits - expected).abs().max() < 1e-4


def test_exported_encoder_gives_the_labs_features_and_masked_lm_logits(sweep):
    """Megatron-BERT: the encoder's hidden states exactly; the masked-LM logits up to the second normalisation of
    its head's transform, a relative eps / (2 variance) of the final residual stream (selfsup.interop.export)."""
    import torch
    import transformers

    import selfsup

    root, _ = sweep
    p = selfsup.load(root / "0")
    ids = torch.tensor([p.encode(SENTENCE.replace("dictionary", "<mask>"))])
    assert p.vocab.mask_id in ids[0].tolist()
    hidden, expected = lab_logits(p, ids)
    features = transformers.AutoModel.from_pretrained(root / "0" / "hf").eval()
    with torch.no_grad():
        assert (features(ids).last_hidden_state - hidden).abs().max() < 1e-4
    residual = {}
    p.model.encoder.ln_f.register_forward_hook(lambda m, args, out: residual.setdefault("x", args[0]))
    lab_logits(p, ids)
    variance = residual["x"].var(-1, unbiased=False).min().item()
    model, logits = hf_logits(root / "0" / "hf", p, ids)
    assert type(model).__name__ == "MegatronBertForMaskedLM"
    bound = 1e-5 / variance * expected.abs().max().item() + 1e-4  # twice the first-order eps / (2 variance)
    assert (logits - expected).abs().max() < bound


def test_exported_tokenizer_encodes_as_the_lab_and_keeps_the_special_ids(sweep):
    import transformers

    import selfsup

    root, _ = sweep
    p = selfsup.load(root / "2")
    tok = transformers.AutoTokenizer.from_pretrained(root / "2" / "hf")
    assert tok(SENTENCE)["input_ids"] == p.encode(SENTENCE)
    v = p.vocab
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.mask_token_id) == (
        v.pad_id,
        v.bos_id,
        v.eos_id,
        v.mask_id,
    )
    assert tok.convert_tokens_to_ids([f"<extra_id_{i}>" for i in range(3)]) == [v.sentinel(i) for i in range(3)]
    assert tok("The <extra_id_0> of a <mask>")["input_ids"] == p.encode("The <extra_id_0> of a <mask>")
    assert tok.decode(p.encode(SENTENCE)) == SENTENCE
    fim = selfsup.load(root / "5")  # FIM's tokens are special tokens of the exported tokenizer
    tok = transformers.AutoTokenizer.from_pretrained(root / "5" / "hf")
    names = ["<fim_prefix>", "<fim_middle>", "<fim_suffix>"]
    assert tok.convert_tokens_to_ids(names) == list(fim.vocab.fim_ids) and set(names) <= set(tok.all_special_tokens)
    prompt = "<fim_prefix>The module<fim_suffix> a list.<fim_middle>"
    assert tok(prompt)["input_ids"] == fim.encode(prompt)


def test_export_maps_every_shape_option(sweep, tmp_path):
    """No biases, ReLU, untied head, more decoder than encoder layers, and weights far from their init: still the
    lab's logits (a checkpoint of the sweep given other settings and perturbed weights)."""
    import torch

    import selfsup
    from selfsup.interop.export import export
    from selfsup.models import TransformerConfig

    root, _ = sweep
    for job, name in ((2, "encoder_decoder"), (1, "decoder")):
        checkpoint = torch.load(root / str(job) / "checkpoints" / "last.ckpt", weights_only=True, map_location="cpu")
        record = checkpoint["selfsup"]
        shape = {
            **record["config"]["architecture"],
            "bias": False,
            "activation": "relu",
            "tie_embeddings": False,
            "n_decoder_layers": 2,
        }
        record["config"]["architecture"] = shape
        torch.manual_seed(job)
        model = TransformerConfig(
            **{k: v for k, v in shape.items() if k in TransformerConfig.__dataclass_fields__}
        ).build(record["vocab_size"], 40)
        with torch.no_grad():
            for param in model.parameters():
                param.add_(0.2 * torch.randn_like(param))
        checkpoint["state_dict"] = {f"model.{k}": v for k, v in model.state_dict().items()}
        path = tmp_path / f"{name}.ckpt"
        torch.save(checkpoint, path)
        export(path, tmp_path / name)
        p = selfsup.load(path)
        assert p.model.lm_head.weight is not p.model.tok_emb.weight and p.model.bias is False
        ids = torch.tensor([p.encode(SENTENCE)])
        decoder_ids = torch.tensor([[p.vocab.bos_id, *p.encode("a dictionary of")]]) if job == 2 else None
        _, expected = lab_logits(p, ids, decoder_ids)
        _, logits = hf_logits(tmp_path / name, p, ids, decoder_ids)
        assert (logits - expected).abs().max() < 1e-4 * max(1.0, expected.abs().max().item())


def test_export_refuses_a_folder_that_holds_files_and_says_what_it_wrote(sweep, tmp_path, capsys):
    from selfsup.interop.export import main as export

    root, _ = sweep
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    for args, words in (
        ([str(root / "1"), str(taken)], "already exists and is not empty"),
        ([str(tmp_path / "nope"), str(tmp_path / "out")], "does not exist"),
    ):
        with pytest.raises(SystemExit) as done:
            export(args)
        err = capsys.readouterr().err
        assert done.value.code == 2 and err.startswith("error: ") and words in err and len(err.splitlines()) == 1
    assert [p.name for p in taken.iterdir()] == ["notes.txt"] and not (tmp_path / "out").exists()
    export([str(root / "3"), str(tmp_path / "prefix")])
    lines = capsys.readouterr().out.splitlines()
    assert "GPT2LMHeadModel" in lines[0] and "AutoModelForCausalLM.from_pretrained" in lines[0]
    assert lines[1].startswith("note: GPT-2 attends causally everywhere")


def test_a_bit_flipped_checkpoint_is_refused_by_export_sample_and_load(sweep, tmp_path, capsys):
    """64 bytes XOR-ed inside a tensor of last.ckpt: the zip's CRC-32 no longer matches; nothing is written."""
    import shutil
    import zipfile

    import selfsup
    from selfsup.interop.export import main as export
    from selfsup.tools.sample import main as sample

    root, _ = sweep
    copy = tmp_path / "run"
    shutil.copytree(root / "1", copy, ignore=shutil.ignore_patterns("hf", "wandb"))
    last = copy / "checkpoints" / "last.ckpt"
    with zipfile.ZipFile(last) as archive:
        entry = max(archive.infolist(), key=lambda i: i.file_size)  # the largest tensor: the embedding
    data = bytearray(last.read_bytes())
    start = entry.header_offset + 30 + len(entry.filename.encode()) + len(entry.extra) + entry.file_size // 2
    data[start : start + 64] = bytes(b ^ 0x5A for b in data[start : start + 64])
    last.write_bytes(bytes(data))
    for run in (
        lambda: export([str(last), str(tmp_path / "hf")]),
        lambda: sample([str(last), "--max-new-tokens", "2"]),
    ):
        with pytest.raises(SystemExit) as done:
            run()
        err = capsys.readouterr().err
        assert done.value.code == 2 and len(err.splitlines()) == 1, err
        assert err.startswith(f"error: {last} is damaged: its entry {entry.filename} does not match its CRC-32")
    assert not (tmp_path / "hf").exists()
    with pytest.raises(selfsup.reliability.errors.CheckpointCorrupt, match="does not match its CRC-32"):
        selfsup.load(last)


@pytest.mark.slow
def test_a_decoder_trained_a_few_hundred_steps_samples_the_corpus_words(train, tmp_path, capsys):
    """selfsup-sample of a decoder after 600 steps (byte-level pieces: a 512-token vocabulary, so words must be
    learnt, not looked up) writes mostly words of the corpus; the same model after 1 step does not."""
    import re

    from selfsup.data.builtin import builtin_documents
    from selfsup.tools.sample import main as sample

    shape = [
        "debug=tiny",
        "objective=clm",
        "eval=none",
        "logger=none",
        "architecture.d_model=128",
        "architecture.n_layers=2",
        "architecture.n_heads=4",
        "data.seq_len=64",
        "data.batch_size=16",
        "optim.lr=2e-3",
        "optim.warmup_steps=30",
    ]
    for steps in (600, 1):
        out = train(
            *shape,
            f"trainer.max_steps={steps}",
            f"trainer.val_check_interval={steps}",
            run_dir=tmp_path / str(steps),
            tiny=False,
        )
        assert out.returncode == 0, out.stderr[-2000:]
    corpus = set(re.findall(r"[A-Za-z]+", " ".join(builtin_documents())))

    def corpus_word_rate(run):
        words = []
        for seed in range(10):
            sample(
                [
                    str(run),
                    "--prompt",
                    "The",
                    "--max-new-tokens",
                    "40",
                    "--temperature",
                    "0.5",
                    "--top-k",
                    "10",
                    "--seed",
                    str(seed),
                ]
            )
            text = capsys.readouterr().out.split("\n", 1)[1]
            words += [w for w in re.findall(r"[A-Za-z]+", text) if len(w) >= 3]
        return sum(w in corpus for w in words) / len(words)

    trained, untrained = corpus_word_rate(tmp_path / "600"), corpus_word_rate(tmp_path / "1")
    assert trained >= 0.5 and untrained <= 0.35, (trained, untrained)


def test_span_corruption_trains_with_a_pretrained_t5_style_tokenizer(train, tmp_path):
    """data.tokenizer=<a tokenizer.json with its own <pad>, </s> and <extra_id_N>>: they become the lab's special
    ids, the missing ones are added, and an objective that needs sentinels trains on the text."""
    from helpers import t5_like_tokenizer, write_corpus

    from selfsup.data import text_file_documents

    corpus = write_corpus(tmp_path / "corpus", n_files=3, docs_per_file=80)
    t5_like_tokenizer(tmp_path / "t5.json", text_file_documents([corpus]), n_extra=100)
    out = train(
        "data=text_files",
        f"data.paths=[{corpus}]",
        f"data.tokenizer={tmp_path / 't5.json'}",
        "objective=span_corruption",
        "logger=csv",
        "eval=none",
        "trainer.max_steps=4",
        tiny=False,
        *["debug=tiny"],
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 4 and math.isfinite(summary["val_loss"])
    import selfsup

    p = selfsup.load(tmp_path / "run")
    assert p.tokenizer.token_to_id("<extra_id_0>") == p.vocab.sentinel(0) and p.tokenizer.id_to_token(2) == "</s>"


# ---------------------------------------------------------------- the minimal pairs' scorers against minicons
PAIR_SENTENCES = [
    s
    for line in (Path(__file__).parents[2] / "docs" / "examples" / "pairs.jsonl").read_text().splitlines()
    for s in json.loads(line).values()
    if s.endswith(".")
]


@pytest.mark.parametrize("job", [0, 1])  # the mlm encoder (pseudo-log-likelihood), the clm decoder (log-prob)
def test_minicons_scores_the_exported_model_as_the_lab_scores_pairs(sweep, job):
    """minicons (BabyLM's scorer library) on the Hugging Face export gives the lab's sentence scores: the
    decoder's log-probability after </s> (conditional_score with </s> as the prefix), the encoder's
    pseudo-log-likelihood between </s> boundaries (sequence_score, </s> as the CLS and SEP tokens it skips)."""
    scorer = pytest.importorskip("minicons.scorer")
    import torch
    import transformers

    import selfsup
    from selfsup.evaluation import scoring as S

    root, _ = sweep
    p = selfsup.load(root / str(job))
    ids = [p.encode(s) for s in PAIR_SENTENCES]
    rows = (S.encoder_rows if job == 0 else S.decoder_rows)(ids, p.vocab)
    ours = S.score_rows(p.model, rows, len(ids), p.vocab.pad_id)
    total = lambda x: x.sum(0).item()  # noqa: E731 - minicons' reduction: the summed log-probability
    if job == 1:
        tok = transformers.AutoTokenizer.from_pretrained(root / "1" / "hf")
        lm = scorer.IncrementalLMScorer(
            transformers.AutoModelForCausalLM.from_pretrained(root / "1" / "hf"), tokenizer=tok
        )
        theirs = lm.conditional_score(["</s>"] * len(ids), PAIR_SENTENCES, separator="", reduction=total)
        tolerance = 1e-3
    else:
        tok = transformers.AutoTokenizer.from_pretrained(root / "0" / "hf", cls_token="</s>", sep_token="</s>")
        if not hasattr(tok, "batch_encode_plus"):  # minicons 0.3's MaskedLMScorer calls what transformers 5 removed
            tok.batch_encode_plus = tok.__call__
        lm = scorer.MaskedLMScorer(transformers.AutoModelForMaskedLM.from_pretrained(root / "0" / "hf"), tokenizer=tok)
        theirs = lm.sequence_score([f"</s>{s}</s>" for s in PAIR_SENTENCES], reduction=total)
        tolerance = 2e-2  # the exported MLM head's second normalisation (selfsup.interop.export): ~1e-3 per logit
    assert len(theirs) == len(ours) == 24
    assert max(abs(a - b) for a, b in zip(ours, theirs)) < tolerance
    good, bad = torch.tensor(theirs[0::2]), torch.tensor(theirs[1::2])
    assert S.accuracy(ours[0::2], ours[1::2]).tolist() == S.accuracy(good.numpy(), bad.numpy()).tolist()


# the report of the objective sweep (~9 s); the default suite: a user's task through a sweep's console, table, report
# and verdict (test_report.py)
@pytest.mark.slow
def test_the_report_of_an_objective_sweep_shows_the_objective_swept_and_the_consoles_verdict(sweep, tmp_path):
    """objective=mlm,clm,...: the report's swept key is `objective` (not each objective's own settings), its
    table has no per-objective setting columns, and its verdict is the console's, word for word."""
    import html
    import re

    root, out = sweep
    done = forked.run(
        ["selfsup-report", str(root), "--out", str(tmp_path / "r.html")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = (tmp_path / "r.html").read_text()
    assert f"{len(OBJECTIVES)} runs; swept: <code>objective</code>." in text
    header = re.findall(r"<th>(.*?)</th>", text.split('<table id="runs">', 1)[1].split("</thead>", 1)[0])
    assert header[:4] == ["run", "objective", "architecture", "val loss*"] and "n/a" not in text.split("</table>")[0]
    block = re.search(r'<div id="verdict"><p><b>(.*?)</b></p><ul>(.*?)</ul></div>', text, re.S)
    shown = " ".join(html.unescape(" ".join([block.group(1), *re.findall(r"<li>(.*?)</li>", block.group(2))])).split())
    printed = out.stdout[out.stdout.index("Verdict (margin") : out.stdout.index("Sweep outputs:")]
    assert shown == " ".join(printed.split())
