"""selfsup-eval end to end: a tiny sweep of the three families scored afterwards on a GLUE-layout RTE file and the
built-in sentence-pair task, fine-tuned, as a user would run it; what it writes, prints and the report shows; bad
input refused in one line with nothing written."""

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import forked
import numpy as np
import pytest
from conftest import wandb_run_record, wandb_summary
from helpers import write_records

ENV = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
SMALL = [
    "eval.tasks.next_sentence.max_train_examples=64",
    "eval.tasks.next_sentence.max_test_examples=40",
    "~eval.tasks.replaced_word",
    "eval.finetune.steps=3",
    "eval.finetune.max_length=48",
    "eval.probe.random_init_seeds=3",
    "eval.generation=null",
]


def selfsup_eval(*args) -> subprocess.CompletedProcess:
    return forked.run(["selfsup-eval", *map(str, args)], capture_output=True, text=True, env=ENV, timeout=600)


def report(sweep: Path, out: Path) -> str:
    """selfsup-report on the sweep, written to `out` (its format by its suffix): the report's text."""
    done = forked.run(
        ["selfsup-report", str(sweep), "--format", out.suffix[1:], "--out", str(out)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out.read_text()


def rte_files(folder: Path) -> tuple[str, str]:
    """RTE's layout (GLUE's TSV as jsonl): sentence1, sentence2, label (entailment / not_entailment), idx."""
    nouns = ["the parser", "a socket", "the module", "this function", "a thread", "the archive", "an iterator"]
    verbs = ["reads", "closes", "returns", "writes", "opens", "checks"]
    rows = []
    for i in range(80):
        a, v = nouns[i % len(nouns)], verbs[(i // len(nouns)) % len(verbs)]
        entailed = i % 2 == 0
        second = f"{a} {v} data" if entailed else f"{nouns[(i + 3) % len(nouns)]} never {v} anything"
        rows.append(
            {
                "sentence1": f"In example {i}, {a} {v} data quickly.",
                "sentence2": second,
                "label": "entailment" if entailed else "not_entailment",
                "idx": i,
            }
        )
    return (
        write_records(folder / "train.jsonl", rows[:60]),
        write_records(folder / "validation.jsonl", rows[60:]),
    )


@pytest.fixture(scope="module")
def families(cache_dir, tmp_path_factory) -> Path:
    """A tiny finished sweep: mlm, clm, span_corruption (the main job's three families)."""
    root = tmp_path_factory.mktemp("eval") / "sweep"
    out = forked.run(
        [
            "selfsup-train",
            "-m",
            "debug=tiny",
            "eval=none",
            f"data.cache_dir={cache_dir}",
            f"hydra.sweep.dir={root}",
            "objective=mlm,clm,span_corruption",
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# three families on two tasks (~45 s); the default suite: the three-class task on the same sweep
@pytest.mark.slow
def test_a_sweep_is_scored_on_rte_and_the_builtin_pair_task_without_training_again(families, tmp_path):
    train, validation = rte_files(tmp_path)
    rte = (
        f"+eval.tasks.rte={{source: text_files, paths: [{train}], test_paths: [{validation}], "
        f"text_fields: [sentence1, sentence2]}}"
    )
    summaries = {p: p.read_bytes() for p in families.glob("*/summary.json")}
    checkpoints = {p: p.stat().st_mtime_ns for p in families.glob("*/checkpoints/*.ckpt")}
    out = selfsup_eval(families, rte, *SMALL)
    assert out.returncode == 0, out.stderr[-3000:]
    # nothing of the runs' own changed
    assert {p: p.read_bytes() for p in summaries} == summaries and len(summaries) == 3
    assert {p: p.stat().st_mtime_ns for p in checkpoints} == checkpoints
    table = out.stdout[out.stdout.index("job | objective") :].splitlines()
    assert [c.strip() for c in table[0].split(" | ")[2:]] == [
        "next_sentence acc",
        "next_sentence margin",
        "rte acc",
        "rte margin",
    ]
    for job, objective in enumerate(["mlm", "clm", "span_corruption"]):
        evaluated = json.loads((families / str(job) / "evaluated.json").read_text())
        scores = evaluated["eval"]
        for task, n in (("rte", 20), ("next_sentence", 40)):
            assert 0 <= scores[f"eval/{task}/accuracy"] <= 1
            assert (
                scores[f"eval/{task}/margin_low"] <= scores[f"eval/{task}/margin"] <= scores[f"eval/{task}/margin_high"]
            )
            with np.load(families / str(job) / "evaluated_outcomes.npz") as outcomes:
                assert outcomes[f"eval/{task}"].shape == (2, n)  # 2 fine-tuning seeds (the default)
                assert outcomes[f"eval/{task}|random_init"].shape == (3, n)
                assert scores[f"eval/{task}/accuracy"] == pytest.approx(outcomes[f"eval/{task}"].mean())
        assert evaluated["evaluations"][0]["protocols"] == {"next_sentence": "finetune", "rte": "finetune"}
        row = [line for line in table if line.startswith(f"{job} ")][0]
        assert objective in row and f"{scores['eval/rte/accuracy']:.3f}" in row
    assert (
        "rte: " in out.stdout and "next_sentence: " in out.stdout and "Verdict (margin over random-init" in out.stdout
    )
    # in W&B: an evaluation run beside each training run (job_type eval, the sweep's group), read back from its files
    for job in range(3):
        run = families / str(job)
        trained = wandb_run_record(
            run, next((run / "wandb").glob(f"offline-run-*-{(run / 'wandb-run-id').read_text()}"))
        )
        [line] = [line for line in out.stdout.splitlines() if f"-> {run / 'evaluated.json'} and W&B run " in line]
        found = re.search(r"and W&B run (\w+) \(offline, job_type eval, group (\S+); upload: wandb sync (\S+)\)$", line)
        assert found and found[2] == trained["run_group"], line
        record = wandb_run_record(run, Path(found[3]))
        assert (record["run_id"], record["job_type"], record["run_group"]) == (found[1], "eval", trained["run_group"])
        assert record["display_name"] == f"{trained['display_name']}-eval" and record["tags"] == [
            *trained["tags"],
            "eval",
        ]
        config = record["config"]["update"]
        assert config["trained_run_id"] == trained["run_id"] and "rte" in config["eval"]["tasks"]
        scores = json.loads((run / "evaluated.json").read_text())["eval"]
        logged = wandb_summary(run, Path(found[3]))["summary"]
        assert logged["eval/rte/accuracy"] == pytest.approx(scores["eval/rte/accuracy"])
        assert logged["eval/next_sentence/margin_high"] == pytest.approx(scores["eval/next_sentence/margin_high"])

    # again, the built-in task alone with other settings: its scores replaced, rte's kept
    before = json.loads((families / "0" / "evaluated.json").read_text())["eval"]
    out = selfsup_eval(families / "0", *SMALL, "eval.finetune.seeds=3")
    assert out.returncode == 0, out.stderr[-3000:]
    after = json.loads((families / "0" / "evaluated.json").read_text())
    assert {k: v for k, v in after["eval"].items() if k.startswith("eval/rte/")} == {
        k: v for k, v in before.items() if k.startswith("eval/rte/")
    }
    with np.load(families / "0" / "evaluated_outcomes.npz") as outcomes:
        assert outcomes["eval/next_sentence"].shape == (3, 40) and outcomes["eval/rte"].shape == (2, 20)
    assert len(after["evaluations"]) == 2

    # each evaluation's settings, per part, where they are read
    settings = after["evaluations"][-1]["settings"]
    assert list(settings) == ["eval/next_sentence"]  # what this evaluation scored
    assert settings["eval/next_sentence"] == {
        "protocol": "finetune",
        **{"steps": 3, "lr": 0.001, "batch_size": 32, "warmup": 0.1, "weight_decay": 0.01, "max_length": 48},
        **{"seeds": 3, "pooling": "auto", "seed": 0, "random_init_seeds": 3},
        **{"train_examples": 64, "test_examples": 40, "max_train_examples": 64, "max_test_examples": 40},
    }
    assert after["evaluations"][0]["settings"]["eval/rte"]["seeds"] == 2

    # the report shows them beside the runs' own, each score with its settings; the verdict never pools run 0's
    # next_sentence (3 fine-tuning seeds) with the others' (2): a line each
    text = report(families, tmp_path / "r.md")
    section = text[text.index("## Evaluated after training") :]
    assert "- next_sentence (seeds=3): " in section and "- next_sentence (seeds=2): " in section
    assert "- rte: " in section  # one setting: one line, as before
    cells = [line for line in section.split("### next_sentence", 1)[1].splitlines() if line.startswith("| 0 | ")]
    assert any("finetune 3 steps x 3 seeds, lr 0.001, max_length 48" in c for c in cells), cells
    assert "### rte" in section and "### next_sentence" in section
    assert f"{after['eval']['eval/rte/accuracy']:.4f}" in section
    page = report(families, tmp_path / "r.html")
    section = page[page.index("<h2>Evaluated after training</h2>") :]
    for task in ("rte", "next_sentence"):
        table = section[section.index(f'<table id="evaluated-{task}">') :]
        table = table[: table.index("</table>")]
        assert table.count("<tr>") == 4  # the head and the three runs
        assert f"{after['eval'][f'eval/{task}/accuracy']:.4f}" in table
    assert '<div id="evaluated-verdict">' in section and "<li>rte: " in section


# selfsup-eval --plan on a sweep (~8 s); the default suite: the plan line in-process
# (tests/evaluation/test_evaluation.py)
@pytest.mark.slow
def test_the_plan_says_each_runs_parts_and_cached_baselines_and_writes_nothing(families):
    """--plan: each run's plan line and the whole; nothing written; other settings: nothing cached. The cache holds
    the built-in task's baselines when the (slow) test above ran first; which baselines a plan reads from the cache
    is tested in-process (tests/evaluation/test_evaluation.py)."""
    before = snapshot(families)
    out = selfsup_eval(families, "--plan", *SMALL)
    assert out.returncode == 0, out.stderr[-3000:]
    assert snapshot(families) == before
    for job in range(3):
        assert re.search(
            rf"^{re.escape(str(families / str(job)))}: plan: task next_sentence \(finetune: 2 seeds \+ random-init 3 "
            rf"seeds(: 3 cached)?, 3 steps each, 64 training and 40 test examples, 64 of 1,038 training examples "
            rf"\(eval.tasks.next_sentence.max_train_examples=null for all\), 40 of 221 test examples "
            rf"\(eval.tasks.next_sentence.max_test_examples=null for all\)(, \d+ reach eval.finetune.max_length=\d+ "
            rf"tokens \(longer ones cut\))?\); about \d+ s \(a \d+ s warm-up\)$",
            out.stdout,
            re.M,
        ), out.stdout
    assert re.search(
        r"^plan: 3 runs, about \d+ s in all; random-init baselines from the cache: (0|9) of 9$", out.stdout, re.M
    )
    assert "evaluated in" not in out.stdout and "job | objective" not in out.stdout
    out = selfsup_eval(families / "1", "--plan", *SMALL, "eval.finetune.steps=4")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.splitlines()[-1].startswith("plan: 1 run, about ")
    assert out.stdout.splitlines()[-1].endswith("; random-init baselines from the cache: 0 of 3")


@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["objective=clm"],
            "selfsup-eval takes eval settings only \\(eval=..., eval.\\*, lm_eval.\\*\\): objective=clm is not one",
        ),
        (["eval.finetune.lr=-1"], "eval.finetune.lr=-1.0 must be a finite number > 0"),
        pytest.param(
            ["+eval.tasks.sts={source: text_files, paths: [STS], text_fields: [sentence1, sentence2]}"],
            "holds the number 3.8, not a class label: a regression task",
            marks=pytest.mark.slow,  # a user task read (~7 s); the default suite: tests/evaluation/test_tasks_faults.py
        ),
        (["eval.tasks.next_sentence.protocol=knn"], "eval.tasks.next_sentence.protocol=knn is unknown"),
        (["eval=nope"], "Could not find 'eval/nope': use one of default, jobs, none, tiny"),
        pytest.param(  # Hydra's own refusals: the default suite has one (eval=nope)
            ["eval.finetune.stepz=3"],
            "Could not override 'eval.finetune.stepz'. To append to your config use",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ["eval.finetune.steps=abc"],
            "Error merging override eval.finetune.steps=abc Value 'abc' of type 'str' "
            "could not be converted to Integer",
            marks=pytest.mark.slow,
        ),
        pytest.param(  # a user task read (~6 s); the default suite: tests/evaluation/test_tasks_faults.py
            [
                "+eval.tasks.x={source: text_files, paths: [STS], test_paths: [/nonexistent/test.jsonl], "
                "text_field: sentence1, label_field: sentence2}"
            ],
            "eval.tasks.x.test_paths: /nonexistent/test.jsonl does not exist",
            marks=pytest.mark.slow,
        ),
        (
            ["eval.generation=null", "eval.generation.continuation.max_new_tokens=5"],
            "eval.generation.continuation.max_new_tokens=5 sets a key under eval.generation, which "
            "eval.generation=null turns off: drop one of the two",
        ),
        (
            ["eval=none", "eval.infilling={fim_layout: spm}"],
            r"eval.infilling=\{fim_layout: spm\}: eval.infilling is null \(off\) in this config, and a setting "
            "cannot be put inside a null part",
        ),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(families, tmp_path, args, message):
    sts = write_records(tmp_path / "sts.jsonl", [{"sentence1": "a b", "sentence2": "c d", "label": 3.8}])
    before = snapshot(families)
    out = selfsup_eval(families, *[a.replace("STS", sts) for a in args])
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr[-3000:]
    assert out.stderr.startswith("error: ") and re.search(message, out.stderr), out.stderr
    assert snapshot(families) == before


def test_a_folder_without_runs_is_one_line(tmp_path):
    out = selfsup_eval(tmp_path)
    assert out.returncode == 2 and "holds no runs" in out.stderr and out.stderr.count("\n") == 1


# generation jobs on three families (~20 s); the default suite: tests/evaluation/test_generation_jobs.py, in-process
@pytest.mark.slow
def test_a_sweep_is_scored_on_generation_jobs_and_an_encoder_is_not(families, tmp_path):
    summary = [
        {"document": f"The report {i} says that parser {i} reads the data.", "summary": f"parser {i} reads"}
        for i in range(30)
    ]
    path = write_records(tmp_path / "summaries.jsonl", summary)
    out = selfsup_eval(
        families,
        "eval.tasks=null",
        "eval.finetune.steps=3",
        "eval.finetune.seeds=2",
        "eval.probe.random_init_seeds=2",
        "eval.generation.continuation.max_train_examples=24",
        "eval.generation.continuation.max_test_examples=12",
        "~eval.generation.docstring_name",
        f"+eval.generation.sum={{source: text_files, paths: [{path}], source_field: document, "
        f"target_field: summary, test_fraction: 0.3, max_new_tokens: 4}}",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    table = out.stdout[out.stdout.index("job | objective") :].splitlines()
    headers = [line for line in table if line.startswith("job | objective")]  # the table, split at 160 columns
    assert max(len(line) for line in table if " | " in line or "-+-" in line) <= 160
    header = [c.strip() for line in headers for c in line.split(" | ")[2:]]  # beside the earlier test's tasks
    at = header.index("continuation loss")
    assert header[at : at + 4] == [
        "continuation loss",
        "continuation loss margin",
        "continuation F1",
        "continuation F1 margin",
    ]
    assert "mlm (0) on encoder: an encoder does not write text: not scored on continuation, sum" in out.stdout
    assert "continuation loss (random-init's minus the run's): " in out.stdout
    encoder = json.loads((families / "0" / "evaluated.json").read_text())
    assert not any(k.startswith(("eval/continuation", "eval/sum")) for k in encoder["eval"])
    for job in ("1", "2"):
        scores = json.loads((families / job / "evaluated.json").read_text())["eval"]
        with np.load(families / job / "evaluated_outcomes.npz") as outcomes:
            assert outcomes["eval/continuation/loss"].shape == (2, 12)
            assert scores["eval/continuation/loss"] == pytest.approx(-outcomes["eval/continuation/loss"].mean())
            assert outcomes["eval/sum/token_f1|random_init"].shape[0] == 2
        gain = scores["eval/sum/random_init_loss"] - scores["eval/sum/loss"]
        assert scores["eval/sum/loss/margin"] == pytest.approx(gain)
        for baseline in ("copy", "frequent"):  # the simple baselines, and the run against them
            low, value, high = (scores[f"eval/sum/{baseline}_token_f1{e}"] for e in ("_low", "", "_high"))
            assert 0 <= low <= value <= high <= 1
            gap = scores["eval/sum/token_f1"] - value
            assert scores[f"eval/sum/token_f1/vs_{baseline}"] == pytest.approx(gap)
    # the shown examples: 5 of the 12 test examples, the same for both writers, with what each and random-init wrote
    from selfsup.evaluation import GenerationJob

    test = GenerationJob(max_test_examples=12).load()[1]
    kept = {}
    for job in ("1", "2"):
        run = families / job
        evaluation = json.loads((run / "evaluated.json").read_text())["evaluations"][-1]
        rows = evaluation["written_examples"]["continuation"]
        assert len(rows) == 5 and all(
            isinstance(r["prediction"], str) and isinstance(r["random_init"], str) for r in rows
        )
        assert [(r["source"], r["reference"]) for r in rows] == [test[r["example"]] for r in rows]
        kept[job] = rows
        # the console's short view: the first of them
        first = rows[0]
        at = out.stdout.index(f"-> {run / 'evaluated.json'}")
        view = out.stdout[at:].split("\n", 1)[1]
        assert view.startswith(f"  continuation, test example {first['example']} (1 of 5 shown in evaluated.json):\n")
        assert f"    reference:   {' '.join(first['reference'].split())!r}" in view
        # and W&B's evaluation run holds them as a Table
        eval_id = out.stdout[at:].split(" and W&B run ", 1)[1].split()[0]
        [offline] = (run / "wandb").glob(f"offline-run-*-{eval_id}")
        [table] = (offline / "files" / "media" / "table" / "eval" / "continuation").glob("predictions_*.table.json")
        logged = json.loads(table.read_text())
        assert logged["columns"] == [
            "example",
            "source",
            "reference",
            "prediction",
            "random_init",
            "exact_match",
            "token_f1",
        ]
        assert logged["data"] == [list(r.values()) for r in rows]
    assert [r["example"] for r in kept["1"]] == [r["example"] for r in kept["2"]]  # fixed by the eval seed
    text = report(families, tmp_path / "r.md")
    shown = text[text.index("### Generated examples") :].split("\n## ", 1)[0]
    for job, label in (("1", "1"), ("2", "2")):
        for r in kept[job]:
            assert f"| continuation | {label} | {r['example']} | " in shown
    section = text[text.index("### continuation") :]
    assert "| 0 | mlm | an encoder does not write text |" in section
    row = [line for line in section.splitlines() if line.startswith("| 1 | clm |")][0]
    scores = json.loads((families / "1" / "evaluated.json").read_text())["eval"]
    assert f"| {scores['eval/continuation/loss']:.4f} |" in row
    copy = [scores[f"eval/continuation/copy_token_f1{e}"] for e in ("", "_low", "_high")]
    parts = [line for line in section.split("\n### ", 1)[0].splitlines() if line.startswith("| 1 | clm |")]
    assert "copy-input F1 [95%]" in section and any(
        f"| {copy[0]:.3f} [{copy[1]:.3f}, {copy[2]:.3f}] |" in r for r in parts
    )


# a training run with a generation job (~12 s); the default suite: tests/evaluation/test_generation_jobs.py, in-process
@pytest.mark.slow
def test_a_training_run_scores_a_generation_job_and_logs_its_predictions_to_wandb(train, tmp_path):
    out = train(
        "debug=tiny",
        "objective=clm",
        "eval.fixed=null",
        "eval.pairs=null",
        "eval.heldout=null",
        "eval.tasks=null",
        "eval.finetune.steps=3",
        "eval.finetune.seeds=1",
        "eval.probe.random_init_seeds=2",
        "+eval.generation.c={job: continuation, max_train_examples: 24, max_test_examples: 10, max_new_tokens: 4}",
        tiny=False,
        run_dir=tmp_path / "run",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run = tmp_path / "run"
    scores = json.loads((run / "summary.json").read_text())["eval"]
    line = [s for s in out.stdout.splitlines() if s.strip().startswith("c  loss ")][0]  # the run's closing lines
    assert f"loss {scores['eval/c/loss']:.3f} (random-init {scores['eval/c/random_init_loss']:.3f}, margin" in line
    [offline] = (run / "wandb").glob("offline-run-*")
    [table] = (offline / "files" / "media" / "table" / "eval" / "c").glob("predictions_*.table.json")
    logged = json.loads(table.read_text())
    columns = ["step", "example", "source", "reference", "prediction", "random_init", "exact_match", "token_f1"]
    assert logged["columns"] == columns
    from selfsup.evaluation import GenerationJob

    test = GenerationJob(max_test_examples=10).load()[1]
    assert len(logged["data"]) == 5 and all(r[0] == 6 for r in logged["data"])
    assert [(r[2], r[3]) for r in logged["data"]] == [test[r[1]] for r in logged["data"]]


def test_help_names_every_argument_eval_option_group_builtin_task_and_job_with_three_examples():
    """Before: a usage line alone."""
    from dataclasses import fields

    from selfsup.evaluation.config import EvalConfig
    from selfsup.evaluation.jobs import GENERATION_JOBS
    from selfsup.evaluation.tasks import BUILTIN_TASKS
    from selfsup.interop.lmeval import LMEval
    from selfsup.tools.evaluate import eval_config

    out = forked.run(["selfsup-eval", "--help"], capture_output=True, text=True, env=ENV, timeout=120)
    assert out.returncode == 0 and not out.stderr.strip(), out.stderr[-2000:]
    text = out.stdout
    for argument in ("RUN_OR_SWEEP_DIR", "--plan", "-h, --help", "eval overrides", "lm_eval overrides"):
        assert f"\n  {argument} " in text, argument
    options = text.split("eval options with their defaults", 1)[1].split("selfsup-eval's default", 1)[0]
    for f in fields(EvalConfig):
        if not f.name.startswith("_"):
            assert f"\n  {f.name}:" in options, f.name  # every eval option group, with its defaults below it
    assert "\n    mask_rates:" in options and "\n    random_init_seeds:" in options  # (their own options)
    lm = text.split("lm_eval options with their defaults", 1)[1]
    assert all(f"\n  {f.name}:" in lm for f in fields(LMEval) if not f.name.startswith("_"))
    assert all(name in text for name in (*BUILTIN_TASKS, *GENERATION_JOBS))
    assert "eval=NAME picks the group's option (default, jobs, none, tiny; default jobs)" in " ".join(text.split())
    # every line within 100 columns but the examples' commands, each one line as a shell reads it, and each runs:
    # its overrides compose (a command wrapped inside its quotes would not)
    commands = [line.strip() for line in text.splitlines() if line.startswith("    selfsup-eval ")]
    assert len(commands) == 3 and max(len(line) for line in text.splitlines() if line.strip() not in commands) <= 100
    assert "label_field: label" in commands[0] and "text_fields: [sentence1, sentence2]" in commands[1]
    assert commands[2] == "selfsup-eval SWEEP 'lm_eval.tasks=[arc_easy]' lm_eval.limit=200"
    for command in commands[:2]:
        assert eval_config(shlex.split(command)[2:]).tasks, command


def test_a_three_class_task_keeps_its_per_class_results_and_the_report_plots_its_confusion(families, tmp_path):
    topics = {"files": ["open", "read", "write"], "network": ["socket", "connect", "send"], "time": ["clock", "sleep"]}
    rows = [
        {"text": f"example {i}: the {words[i % len(words)]} call {'returns' if i % 2 else 'raises'}", "label": topic}
        for i in range(30)
        for topic, words in topics.items()
    ]
    path = write_records(tmp_path / "topics.jsonl", rows)
    task = f"+eval.tasks.topic={{source: text_files, paths: [{path}], test_fraction: 0.3}}"
    run = families / "1"
    small = [a for a in SMALL if not a.startswith("eval.tasks.next_sentence.")] + ["~eval.tasks.next_sentence"]
    out = selfsup_eval(run, task, *small)
    assert out.returncode == 0, out.stderr[-3000:]
    evaluated = json.loads((run / "evaluated.json").read_text())
    found = evaluated["evaluations"][-1]["per_class"]["topic"]
    assert found["classes"] == ["files", "network", "time"] and found["fine_tuning_seeds"] == 2
    matrix = np.array(found["confusion"])
    n = sum(found["test_examples"])
    assert matrix.shape == (3, 3) and matrix.sum() == 2 * n  # every test example, once per fine-tuning seed
    assert list(matrix.sum(1)) == [2 * k for k in found["test_examples"]]
    # the task's accuracy is the matrix's diagonal share; each class's, its row's
    assert np.trace(matrix) / matrix.sum() == pytest.approx(evaluated["eval"]["eval/topic/accuracy"])
    assert found["accuracy"] == [round(matrix[i, i] / matrix[i].sum(), 4) for i in range(3)]
    # and W&B's evaluation run holds them as a Table
    eval_id = out.stdout.split(" and W&B run ", 1)[1].split()[0]
    [offline] = (run / "wandb").glob(f"offline-run-*-{eval_id}")
    [table] = (offline / "files" / "media" / "table" / "eval" / "topic").glob("per_class_*.table.json")
    logged = json.loads(table.read_text())
    assert logged["columns"] == ["class", "test_examples", "accuracy", "f1"]
    assert logged["data"][2] == ["time", found["test_examples"][2], found["accuracy"][2], found["f1"][2]]
    text = report(families, tmp_path / "r.md")
    section = text[text.index("### Per-class results") :].split("\n### ", 1)[0]
    label = [r for r in section.splitlines() if r.startswith("| topic | 1 | network |")]
    assert len(label) == 1 and f"| {found['test_examples'][1]} | {found['accuracy'][1]:.3f} |" in label[0]
    assert "![confusion_topic](r-confusion_topic.png)" in text and (tmp_path / "r-confusion_topic.png").stat().st_size
