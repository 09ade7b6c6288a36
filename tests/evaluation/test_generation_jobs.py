"""Generation jobs (eval.generation): the built-in input -> output job is held out and fair, user jobs read the
source/target layout and refuse a bad record in one line, each writing family is fine-tuned and scored beside its
random-init baselines (the loss's margin random-init's minus the run's), an encoder is not scored, and the run's
model and RNG are untouched."""

import math
import re

import numpy as np
import pytest
import torch
from helpers import write_records
from hydra import compose, initialize_config_dir

from selfsup.data.builtin import builtin_documents
from selfsup.evaluation import EvalError, GenerationJob
from selfsup.evaluation.builtin import docstring_name_examples, name_words, probe_sentences
from selfsup.evaluation.generation import NOT_A_WRITER, prepare
from selfsup.evaluation.infilling import INFILLING, NOT_INFILLED
from selfsup.evaluation.stats import margin
from selfsup.results.groups import load_outcomes
from selfsup.run.build import build
from selfsup.run.cli import CONF_DIR
from selfsup.run.schema import register
from selfsup.run.settings import RunSettings

TINY = ["debug=tiny", "eval.pairs=null", "eval.heldout=null", "eval.fixed=null", "~eval.tasks.probe"]
JOB = "+eval.generation.c={job: continuation, max_train_examples: 48, max_test_examples: 24, max_new_tokens: 6}"


def config(cache_dir, *overrides):
    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return compose("train", overrides=[*TINY, f"data.cache_dir={cache_dir}", *overrides])


# ---------------------------------------------------------------------------------------- the built-in jobs
@pytest.mark.parametrize(
    "name,words",
    [
        ("_get_help_string", "get help string"),
        ("ArgumentTypeError", "argument type error"),
        ("setLevel", "set level"),
        ("__dict_replace", "dict replace"),
        ("HTTPServer", "http server"),
        ("cbrt", "cbrt"),
    ],
)
def test_a_name_is_written_as_its_words(name, words):
    assert name_words(name) == words


def test_the_builtin_docstring_name_job_is_held_out_and_never_copies_its_target():
    examples = docstring_name_examples()
    text = " ".join(" ".join(doc.split()) for doc in builtin_documents())
    held = set(probe_sentences())
    sources = [s for s, _, _ in examples]
    assert len(examples) > 1000 and len(set(sources)) == len(sources)  # each source once
    for source, target, _ in examples:
        assert source in held and source not in text  # a held-out sentence, never in the pretraining corpus
        assert target and target not in source.lower()  # the target is never copied from the source
        assert re.fullmatch(r"[a-z0-9]+( [a-z0-9]+)*", target)
    n, tested = len(examples), sum(t for _, _, t in examples)
    assert abs(tested - 0.2 * n) <= 4 * math.sqrt(n * 0.2 * 0.8)  # split by the source's hash: 4 sigma


def test_a_builtin_job_loads_its_split_and_an_unknown_one_is_refused():
    train, test = GenerationJob(job="docstring_name", name="n").load()
    assert len(train) > 4 * len(test) / 2 and not {s for s, _ in train} & {s for s, _ in test}
    with pytest.raises(EvalError, match=r"^eval.generation.x.job=summary is not a built-in generation job: use one"):
        GenerationJob(job="summary", name="x").load()


# ---------------------------------------------------------------------------------------- user jobs
ROWS = [{"document": f"Document {i} says that the parser {i} reads data.", "summary": f"parser {i}"} for i in range(50)]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_a_user_job_reads_the_source_target_layout_of_files(tmp_path, fmt):
    train = write_records(tmp_path / f"train.{fmt}", ROWS[:40], fmt)
    test = write_records(tmp_path / f"test.{fmt}", ROWS[40:], fmt)
    job = GenerationJob(
        source="text_files", paths=[train], test_paths=[test], source_field="document", target_field="summary"
    )
    got_train, got_test = job.load()
    assert got_train == [(r["document"], r["summary"]) for r in ROWS[:40]]
    assert got_test == [(r["document"], r["summary"]) for r in ROWS[40:]]


def test_a_user_job_from_a_datasets_folder(tmp_path):
    write_records(tmp_path / "train.jsonl", ROWS[:40])
    write_records(tmp_path / "validation.jsonl", ROWS[40:])
    job = GenerationJob(
        source="hf_dataset",
        hf_name="json",
        data_files={"train": str(tmp_path / "train.jsonl"), "validation": str(tmp_path / "validation.jsonl")},
        source_field="document",
        target_field="summary",
    )
    train, test = job.load()
    assert len(train) == 40 and test[0] == (ROWS[40]["document"], ROWS[40]["summary"])


@pytest.mark.parametrize(
    "rows,settings,message",
    [
        (ROWS, {"target_field": "title"}, r"no field 'title' in record 1 .*: set eval.generation.j.target_field$"),
        (
            [*ROWS[:3], {"document": "A text.", "summary": ""}],
            {},
            r"rows.jsonl:4: field 'summary' is empty: every example needs a non-empty source and target text; fix or "
            r"remove it, or set eval.generation.j.target_field$",
        ),
        (
            [*ROWS[:3], {"document": 7, "summary": "seven"}],
            {},
            r"rows.jsonl:4: field 'document' holds 7, not text: .* set eval.generation.j.source_field$",
        ),
        (
            [*ROWS[:3], {"document": "A text.", "summary": "the ."}],
            {},
            r"rows.jsonl:4: field 'summary' holds 'the .', which is empty once normalised \(lower case, punctuation "
            r"and the articles a/an/the removed, as exact match and F1 read it\): every target needs a word",
        ),
        (ROWS, {"paths": []}, r"^eval.generation.j.paths is empty: list .jsonl/.csv/.parquet files with 'document'"),
        (ROWS, {"max_new_tokens": 0}, r"^eval.generation.j.max_new_tokens=0 must be at least 1"),
    ],
)
def test_a_bad_user_job_is_one_line(tmp_path, rows, settings, message):
    path = write_records(tmp_path / "rows.jsonl", rows)
    job = GenerationJob(
        **{"source": "text_files", "paths": [path], "source_field": "document", "target_field": "summary", **settings},
        name="j",
    )
    with pytest.raises(EvalError, match=message) as err:
        job.load()
    assert "\n" not in str(err.value)


def test_examples_are_cut_to_the_models_positions_and_references_kept_whole(capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i + 3 for i in range(60)} | {"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    long = " ".join(f"w{i}" for i in range(40))
    pairs = [(long, long), ("w1 w2", "w3")]
    for arch, width in (("decoder", 16), ("encoder_decoder", 16)):
        job = prepare(arch, tokenizer, pairs, pairs, 2, 1, 0, width, 5)
        assert job.train.inputs.shape[1] <= width and job.references == [long, "w3"]
        if arch == "decoder":  # source eos target eos: the target its first width // 2 - 1 tokens
            assert (job.train.labels[0] != -100).sum() == width // 2 - 1 + 1
        else:
            assert job.train.encoder_inputs.shape[1] == width and (job.train.labels[0] != -100).sum() == width
        assert len(job.sources[0]) < width and job.sources[1] == [4, 5]
        assert capsys.readouterr().err == ""  # no name: not said
    prepare("decoder", tokenizer, pairs, pairs * 3, 2, 1, 0, 16, 5, name="j")
    assert capsys.readouterr().err == (
        "warning: generation job j: 3 of 6 test targets cut to their first 7 tokens (longer than 16 positions "
        "allow): their exact match and F1 compare what the writer can write with the whole reference; raise "
        "eval.finetune.max_length (and data.seq_len) or shorten the targets\n"
    )


# ---------------------------------------------------------------------------------------- scored in a run
@pytest.mark.parametrize("objective", ["clm", "span_corruption"])
def test_a_writer_is_fine_tuned_and_scored_beside_random_init(tmp_path, objective):
    cfg = config(
        tmp_path / "cache",
        f"objective={objective}",
        JOB,
        "eval.finetune.steps=4",
        "eval.finetune.seeds=2",
        "eval.finetune.max_length=32",
        "eval.probe.random_init_seeds=2",
    )
    run = build(RunSettings.of(cfg))
    model, evaluation = run.model, run.module.evaluation
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    metrics = evaluation(model)
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    outcomes = evaluation.outcomes()
    for score in ("loss", "exact_match", "token_f1"):
        key = f"eval/c/{score}"
        trained, untrained = outcomes[key], outcomes[f"{key}|random_init"]
        assert trained.shape == (2, 24) and untrained.shape == (2, 24)
        sign = -1 if score == "loss" else 1  # outcomes are the higher the better: a loss's negated
        assert metrics[key] == pytest.approx(sign * trained.mean())
        assert metrics[f"eval/c/random_init_{score}"] == pytest.approx(sign * untrained.mean())
        m = margin(trained, untrained)
        assert (metrics[f"{key}/margin"], metrics[f"{key}/margin_low"]) == (m.value, m.low)
    loss_gain = metrics["eval/c/random_init_loss"] - metrics["eval/c/loss"]
    assert metrics["eval/c/loss/margin"] == pytest.approx(loss_gain)
    assert 0 < metrics["eval/c/loss"] < 2 * math.log(512)
    assert 0 <= metrics["eval/c/exact_match"] <= metrics["eval/c/token_f1"] <= 1
    rows = evaluation.written_examples["c"]  # the shown examples (the W&B Table's rows, evaluated.json's)
    test = GenerationJob(max_test_examples=24).load()[1]
    assert len(rows) == 5 and all(len(r) == 7 for r in rows)  # examples_shown=5 of the 24, in test order
    assert [r[0] for r in rows] == sorted({r[0] for r in rows}) and [r[0] for r in rows] != [0, 1, 2, 3, 4]
    assert [(r[1], r[2]) for r in rows] == [test[r[0]] for r in rows]
    assert all(isinstance(r[3], str) and isinstance(r[4], str) for r in rows)  # the run's and random-init's writing
    again = evaluation(model)  # the same seeds: the same fine-tunes
    assert again["eval/c/token_f1"] == metrics["eval/c/token_f1"] and again["eval/c/loss"] == metrics["eval/c/loss"]
    # another run of the shape (its random-init writers from the cache) shows the same examples, random-init's
    # writing read back with them
    other = build(RunSettings.of(cfg)).module.evaluation
    other(model)
    assert other.written_examples["c"] == rows


def test_the_verdict_checks_a_jobs_outcomes_against_its_summary(tmp_path):
    cfg = config(tmp_path / "cache", "objective=clm", JOB, "eval.finetune.steps=2", "eval.finetune.seeds=1")
    run = build(RunSettings.of(cfg))
    metrics = run.module.evaluation(run.model)
    outcomes = run.module.evaluation.outcomes()
    np.savez(tmp_path / "outcomes.npz", **outcomes)
    row = {"run_dir": str(tmp_path), "eval": metrics}
    assert isinstance(load_outcomes(row), dict)
    changed = {**metrics, "eval/c/loss": metrics["eval/c/loss"] + 0.01}
    assert load_outcomes({**row, "eval": changed}) == "outcomes do not match summary.json"


def test_an_encoder_is_not_scored_and_a_bad_job_setting_is_one_line(tmp_path):
    run = build(RunSettings.of(config(tmp_path / "cache", "objective=mlm", JOB)))
    metrics = run.module.evaluation(run.model)
    assert run.module.evaluation.not_written == {"c": NOT_A_WRITER, INFILLING: NOT_INFILLED}
    assert not any(k.startswith(("eval/c", "eval/infilling")) for k in metrics)
    cfg = config(tmp_path / "cache", "objective=clm", JOB, "+eval.tasks.c={source: builtin}")
    with pytest.raises(EvalError, match=r"^eval.generation.c and eval.tasks.c share a name"):
        build(RunSettings.of(cfg))
    evaluation = run.module.evaluation
    with pytest.raises(EvalError, match=r"FSDP shards cannot be: use eval.generation=null with trainer=fsdp$"):
        evaluation.check(sharded=True)
