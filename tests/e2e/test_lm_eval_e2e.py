"""selfsup-eval's lm-evaluation-harness bridge end to end: a tiny sweep of the three families scored on two local
lm-eval tasks (a multiple-choice task and a loglikelihood task: task YAMLs over JSON files, no hub), beside
random-init models of each run's shape; the lab's numbers equal lm-eval's own CLI on the same export; what it
writes, logs to W&B and the report shows; bad input refused in one line with nothing written."""

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import forked
import numpy as np
import pytest
from conftest import wandb_run_record, wandb_summary
from helpers import write_records

from selfsup.tools.evaluate import main

ENV = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
WORDS = "list file server stream value string dictionary place components thread socket buffer".split()
SENTENCES = [
    f"{verb} the {noun}."
    for verb in ("Return", "Open", "Close", "Write", "Read", "Check")
    for noun in ("list", "file", "server", "stream", "thread")
]  # 30 documents


def task_folder(folder: Path, generate: bool = False) -> Path:
    """lm-eval task YAMLs over local JSON files: selfsup_mc (multiple choice: the last word of a sentence among 4)
    and selfsup_ll (loglikelihood: the last word after the rest), and with `generate` selfsup_gen (generate_until)
    and selfsup_long (loglikelihood, a target longer than a tiny model's 32 tokens)."""
    folder.mkdir(parents=True, exist_ok=True)
    mc = []
    for i, sentence in enumerate(SENTENCES):
        *rest, last = sentence.rstrip(".").split()
        others = [w for w in WORDS if w != last]
        choices = [last, *(others[(i + k) % len(others)] for k in range(3))]
        choices = choices[i % 4 :] + choices[: i % 4]
        mc.append({"context": " ".join(rest), "choices": choices, "label": choices.index(last)})
    data = {
        "mc": write_records(folder / "mc.jsonl", mc),
        "ll": write_records(folder / "ll.jsonl", [{"text": s} for s in SENTENCES]),
    }
    common = "dataset_path: json\ntest_split: test\ndataset_kwargs:\n  data_files:\n    test: {}\n"
    (folder / "selfsup_mc.yaml").write_text(
        "task: selfsup_mc\n"
        + common.format(data["mc"])
        + 'output_type: multiple_choice\ndoc_to_text: "{{context}}"\ndoc_to_choice: "{{choices}}"\n'
        'doc_to_target: "{{label}}"\nmetric_list:\n  - metric: acc\n  - metric: acc_norm\n'
    )
    (folder / "selfsup_ll.yaml").write_text(
        "task: selfsup_ll\n"
        + common.format(data["ll"])
        + "output_type: loglikelihood\ndoc_to_text: \"{{text.split(' ')[:-1]|join(' ')}}\"\n"
        "doc_to_target: \"{{' ' + text.split(' ')[-1]}}\"\nmetric_list:\n"
        "  - metric: perplexity\n    aggregation: perplexity\n    higher_is_better: false\n  - metric: acc\n"
    )
    if generate:
        (folder / "selfsup_gen.yaml").write_text(
            "task: selfsup_gen\n"
            + common.format(data["ll"])
            + "output_type: generate_until\ndoc_to_text: \"{{text.split(' ')[0]}}\"\n"
            "doc_to_target: \"{{text}}\"\ngeneration_kwargs:\n  until: ['.']\nmetric_list:\n  - metric: exact_match\n"
        )
        long = write_records(folder / "long.jsonl", [{"text": " ".join(SENTENCES)}])
        (folder / "selfsup_long.yaml").write_text(
            "task: selfsup_long\n"
            + common.format(long)
            + "output_type: loglikelihood\ndoc_to_text: \"{{text.split(' ')[0]}}\"\n"
            "doc_to_target: \"{{' ' + text.split(' ')[1:]|join(' ')}}\"\nmetric_list:\n  - metric: acc\n"
        )
    return folder


def selfsup_eval(*args) -> subprocess.CompletedProcess:
    return forked.run(["selfsup-eval", *map(str, args)], capture_output=True, text=True, env=ENV, timeout=900)


def lm_eval_cli(export: Path, backend: str, tasks: Path, out: Path) -> dict:
    """lm-eval's own command line on an export: its results json's `results`."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--model",
            "hf",
            "--model_args",
            f"pretrained={export},backend={backend}",
            "--tasks",
            "selfsup_mc,selfsup_ll",
            "--include_path",
            str(tasks),
            "--batch_size",
            "4",
            "--device",
            "cpu",
            "--output_path",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [found] = out.rglob("results_*.json")
    return json.loads(found.read_text())["results"]


@pytest.fixture(scope="module")
def families(cache_dir, tmp_path_factory) -> Path:
    """A tiny finished sweep: mlm, clm, span_corruption (the main job's three families)."""
    root = tmp_path_factory.mktemp("lm_eval") / "sweep"
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


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> Path:
    """The local task folder (one per module: lm-eval's index of it is built once per process)."""
    return task_folder(tmp_path_factory.mktemp("tasks"), generate=True)


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# three families beside lm-eval's own CLI (~2 min); the default suite writes the lab's tasks as lm-eval reads them
@pytest.mark.slow
def test_a_sweep_is_scored_by_lm_eval_beside_random_init_as_lm_evals_cli_scores_it(
    families, tasks, cache_dir, tmp_path
):
    summaries = {p: p.read_bytes() for p in families.glob("*/summary.json")}
    args = ["lm_eval.tasks=[selfsup_mc,selfsup_ll]", f"lm_eval.include_path=[{tasks}]", "lm_eval.batch_size=4"]
    out = selfsup_eval(families, *args)
    assert out.returncode == 0, out.stderr[-3000:]
    assert {p: p.read_bytes() for p in summaries} == summaries  # the runs' own scores untouched
    assert (
        f"{families / '0'}: mlm on encoder: not scored by lm-eval: lm-eval scores decoders (hf, causal) and "
        f"encoder-decoders (hf, seq2seq); it has no backend for encoders" in out.stdout
    )
    assert not (families / "0" / "evaluated.json").exists()
    for job, backend in (("1", "causal"), ("2", "seq2seq")):
        run = families / job
        evaluated = json.loads((run / "evaluated.json").read_text())
        scores = evaluated["eval"]
        for task, metric, n in (("selfsup_mc", "acc", 30), ("selfsup_mc", "acc_norm", 30), ("selfsup_ll", "acc", 30)):
            key = f"eval/lm_eval/{task}/{metric}"
            with np.load(run / "evaluated_outcomes.npz") as outcomes:
                trained, untrained = outcomes[key], outcomes[f"{key}|random_init"]
            assert trained.shape == (n,) and untrained.shape == (3, n)  # documents; 3 random-init models
            assert scores[key] == pytest.approx(trained.mean(), abs=1e-12)
            assert scores[f"eval/lm_eval/{task}/random_init_{metric}"] == pytest.approx(untrained.mean(), abs=1e-12)
            # a mean of 0/1 outcomes: lm-eval's stderr is the sample sd over sqrt(n)
            assert scores[f"{key}_stderr"] == pytest.approx(trained.std(ddof=1) / np.sqrt(n), rel=1e-9)
            assert scores[f"{key}/margin"] == pytest.approx(trained.mean() - untrained.mean(), abs=1e-12)
            assert scores[f"{key}/margin_low"] <= scores[f"{key}/margin"] <= scores[f"{key}/margin_high"]
        # perplexity: its documents are log-likelihoods, its margin log(random-init's) - log(the run's)
        key = "eval/lm_eval/selfsup_ll/perplexity"
        with np.load(run / "evaluated_outcomes.npz") as outcomes:
            loglikelihoods, untrained = outcomes[key], outcomes[f"{key}|random_init"]
        assert scores[key] == pytest.approx(np.exp(-loglikelihoods.mean()), rel=1e-9)
        assert scores[f"{key}/margin"] == pytest.approx(loglikelihoods.mean() - untrained.mean(), rel=1e-9)
        assert evaluated["evaluations"][-1]["lm_eval"]["backend"] == backend
        # a multiple-choice task's chance level: a random pick among each document's 4 choices
        assert scores["eval/lm_eval/selfsup_mc/chance_acc"] == scores["eval/lm_eval/selfsup_mc/chance_acc_norm"] == 0.25
        assert not any(k.startswith("eval/lm_eval/selfsup_ll/chance_") for k in scores)  # loglikelihood: none

        # lm-eval's own CLI on the same export (the run's last weights) gives the same numbers
        export = tmp_path / f"hf-{job}"
        done = forked.run(
            ["selfsup-export", str(run / "checkpoints" / "last.ckpt"), str(export)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        cli = lm_eval_cli(export, backend, tasks, tmp_path / f"cli-{job}")
        for task, metric in (("selfsup_mc", "acc"), ("selfsup_mc", "acc_norm"), ("selfsup_ll", "perplexity")):
            assert scores[f"eval/lm_eval/{task}/{metric}"] == pytest.approx(cli[task][f"{metric},none"], rel=1e-9)
        assert scores["eval/lm_eval/selfsup_mc/acc_stderr"] == pytest.approx(cli["selfsup_mc"]["acc_stderr,none"])

        # in W&B: an evaluation run beside the training run (job_type eval, its group), read back from its files
        run_id = (run / "wandb-run-id").read_text().strip()
        [line] = [line for line in out.stdout.splitlines() if f"-> {run / 'evaluated.json'} and W&B run " in line]
        eval_id = line.split(" and W&B run ")[1].split()[0]
        offline = sorted((run / "wandb").glob(f"offline-run-*-{eval_id}"))
        record = wandb_run_record(run, offline[-1])
        assert record["job_type"] == "eval" and record["config"]["update"]["trained_run_id"] == run_id
        assert record["config"]["update"]["lm_eval"]["tasks"] == ["selfsup_mc", "selfsup_ll"]
        logged = wandb_summary(run, offline[-1])
        assert logged["summary"]["eval/lm_eval/selfsup_mc/acc"] == pytest.approx(scores["eval/lm_eval/selfsup_mc/acc"])
        [table] = (offline[-1] / "files" / "media" / "table" / "eval" / "lm_eval").glob("results_*.table.json")
        rows = json.loads(table.read_text())["data"]
        assert [r[:2] for r in rows] == [
            ["selfsup_mc", "acc"],
            ["selfsup_mc", "acc_norm"],
            ["selfsup_ll", "perplexity"],
            ["selfsup_ll", "acc"],
        ]

    # the table and the verdict read them
    table = out.stdout[out.stdout.index("job | objective") :].splitlines()
    header = " | ".join(c.strip() for line in table if line.startswith("job | ") for c in line.split(" | ")[2:])
    assert "selfsup_mc acc | selfsup_mc acc stderr | selfsup_mc acc chance | selfsup_mc acc margin" in header
    assert "selfsup_ll acc | selfsup_ll acc stderr | selfsup_ll acc margin" in header  # not multiple choice
    assert "lm_eval selfsup_mc acc: " in out.stdout and "lm_eval selfsup_ll perplexity: " in out.stdout
    lines = out.stdout.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("  lm_eval selfsup_mc acc: ")))
    entry = [lines[at], *itertools.takewhile(lambda line: line.startswith("    "), lines[at + 1 :])]
    assert "chance level 0.250 (a random pick among each document's choices)" in " ".join(" ".join(entry).split())

    # the random-init models are cached: 3 per shape, read again by a second evaluation with the same settings
    assert len(list((cache_dir / "lm-eval-random-init").glob("*.json"))) >= 6
    before = json.loads((families / "1" / "evaluated.json").read_text())["eval"]
    again = selfsup_eval(families / "1", *args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("(cached)") == 3
    after = json.loads((families / "1" / "evaluated.json").read_text())
    assert after["eval"] == before and len(after["evaluations"]) == 2

    # the report shows them, the encoder said not to be scored
    done = forked.run(
        ["selfsup-report", str(families), "--format", "md", "--out", str(tmp_path / "r.md")],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = (tmp_path / "r.md").read_text()
    section = text[text.index("### lm-eval selfsup_mc") :]
    assert "| 0 | mlm | lm-eval has no backend for encoders |" in section
    row = [line for line in section.splitlines() if line.startswith("| 1 | clm | acc |")][0]
    assert f"| {before['eval/lm_eval/selfsup_mc/acc']:.4g} |" in row


# a sweep trained and scored by lm-eval (~40 s); the default suite writes the lab's tasks as lm-eval reads them (below)
@pytest.mark.slow
def test_a_run_whose_wandb_id_is_lost_says_its_scores_reached_no_wandb_run(families, tasks, tmp_path):
    """Before: the lm-eval scores of a W&B-logged run without its wandb-run-id file reached no W&B run, silently."""
    run = Path(shutil.copytree(families / "1", tmp_path / "run", ignore=shutil.ignore_patterns("evaluated*")))
    (run / "wandb-run-id").unlink()
    args = ["lm_eval.tasks=[selfsup_mc]", f"lm_eval.include_path=[{tasks}]", "lm_eval.limit=8"]
    out = selfsup_eval(run, *args, "lm_eval.random_init_seeds=2")
    assert out.returncode == 0, out.stderr[-3000:]
    [line] = [line for line in out.stdout.splitlines() if line.startswith("  lm-eval in ")]
    assert line.endswith(f"(W&B: not logged, {run / 'wandb-run-id'} is missing: the run's W&B id is unknown; the "
                         "scores are in evaluated.json)"), line  # fmt: skip
    assert "eval/lm_eval/selfsup_mc/acc" in json.loads((run / "evaluated.json").read_text())["eval"]


@pytest.mark.slow  # the seq2seq backend: the sweep's span corruption run; t5's export: test_t5_e2e.py
def test_the_t5_preset_is_scored_by_lm_evals_seq2seq_backend(train, tasks, tmp_path):
    run = tmp_path / "t5"
    done = train("debug=tiny", "eval=none", "objective=span_corruption", "architecture=t5", run_dir=run, tiny=False)
    assert done.returncode == 0, done.stderr[-2000:]
    settings = ["lm_eval.tasks=[selfsup_mc]", f"lm_eval.include_path=[{tasks}]", "lm_eval.random_init_seeds=2"]
    out = selfsup_eval(run, *settings, "lm_eval.limit=10")
    assert out.returncode == 0, out.stderr[-3000:]
    evaluated = json.loads((run / "evaluated.json").read_text())
    assert evaluated["evaluations"][-1]["lm_eval"]["backend"] == "seq2seq"
    with np.load(run / "evaluated_outcomes.npz") as outcomes:
        trained = outcomes["eval/lm_eval/selfsup_mc/acc"]
    assert trained.shape == (10,)
    assert evaluated["eval"]["eval/lm_eval/selfsup_mc/acc"] == pytest.approx(trained.mean(), abs=1e-12)


# the trained sweep above and lm-eval's task index (~30 s); the default suite: selfsup-eval's bad-input lines
# (test_eval_e2e.py)
@pytest.mark.slow
@pytest.mark.parametrize(
    "where,args,message",
    [
        ("", ["lm_eval.tasks=[selfsup_nope]"], "lm_eval.tasks: selfsup_nope is not an lm-eval task or in "),
        ("", ["lm_eval.tasks=[]"], "lm_eval.tasks is empty: name lm-eval tasks"),
        ("", ["lm_eval.tasks=[selfsup_mc]", "lm_eval.random_init_seeds=1"], "random_init_seeds=1 must be a whole"),
        ("0", ["lm_eval.tasks=[selfsup_mc]"], "0: encoder: lm-eval scores decoders (hf, causal) and encoder-decoders"),
        ("0", ["lm_eval.tasks=[selfsup_gen]"], "selfsup_gen needs generated text (output_type generate_until), which"),
        ("gone", ["lm_eval.tasks=[selfsup_mc]"], "has no checkpoints/last.ckpt: the weights it ended with are gone"),
        ("1", ["lm_eval.tasks=[selfsup_long]"], "lm-eval cannot score a target longer than the model's 32 tokens"),
        ("", ["lm_eval.tasks=[selfsup_mc]", "objective=clm"], "selfsup-eval takes eval settings only"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(families, tasks, tmp_path, capsys, where, args, message):
    target = families / where if where != "gone" else tmp_path / "gone"
    if where == "gone":  # a run whose weights were deleted
        import shutil

        shutil.copytree(families / "1", target, ignore=shutil.ignore_patterns("*.ckpt", "wandb"))
    before = snapshot(families)
    with pytest.raises(SystemExit) as exit:
        main([str(target), *args, f"lm_eval.include_path=[{tasks}]"])
    err = capsys.readouterr().err
    if where == "1":  # lm-eval's progress bars up to the target it cannot score, then the line
        err = err.splitlines(keepends=True)[-1]
    assert exit.value.code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    assert message in err, err
    assert snapshot(families) == before


@pytest.mark.slow  # the trained sweep above; the default suite: the bad-input lines of selfsup-eval (test_eval_e2e.py)
def test_without_lm_eval_installed_the_line_says_how_to_install_it(families, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # Python's own "not importable" (as if not installed)
    with pytest.raises(SystemExit) as exit:
        main([str(families), "lm_eval.tasks=[hellaswag]"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err == (
        "error: lm-eval is not installed: pip install -e '.[lmeval]' (or pip install 'lm-eval>=0.4.13,<0.5')\n"
    )


def test_the_labs_local_tasks_are_written_as_lm_eval_reads_them(tmp_path, capsys):
    from lm_eval.tasks import TaskManager, get_task_dict

    from selfsup.evaluation.pair_sets import builtin_pairs
    from selfsup.interop.lmeval import main as lmeval_main

    lmeval_main(["tasks", str(tmp_path / "t")])
    assert capsys.readouterr().out.endswith(f"lm_eval.include_path=[{tmp_path / 't'}]\n")
    names = sorted(p.name for p in (tmp_path / "t").iterdir())
    assert names == ["selfsup_last_word.jsonl", "selfsup_last_word.yaml", "selfsup_pairs.jsonl", "selfsup_pairs.yaml"]
    manager = TaskManager(include_path=str(tmp_path / "t"), include_defaults=False)  # the folder's tasks alone
    found = get_task_dict(["selfsup_pairs", "selfsup_last_word"], manager)
    pairs, last = (list(found[name].test_docs()) for name in ("selfsup_pairs", "selfsup_last_word"))
    expected = builtin_pairs(max_pairs=500, types=["replaced_1"])
    assert len(pairs) == len(last) == 500
    assert [(d["sentence_good"], d["sentence_bad"]) for d in pairs] == list(zip(expected.good, expected.bad))
    task = found["selfsup_pairs"]
    assert task.doc_to_choice(pairs[0]) == [pairs[0]["sentence_good"], pairs[0]["sentence_bad"]]
    assert task.doc_to_target(pairs[0]) == 0 and task.doc_to_text(pairs[0]) == ""
    task, doc = found["selfsup_last_word"], last[0]
    assert task.doc_to_text(doc) == doc["context"] and task.doc_to_target(doc) == " " + doc["word"]
    assert all(" " not in d["word"] and d["context"] for d in last)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        lmeval_main(["task"])
    assert exit.value.code == 2 and capsys.readouterr().err.startswith("usage: python -m selfsup.lmeval tasks FOLDER")


def test_the_tasks_into_a_file_is_one_line(tmp_path, capsys):
    """Before: a traceback (FileExistsError / NotADirectoryError)."""
    from selfsup.interop.lmeval import main as lmeval_main

    (tmp_path / "afile").write_text("x")
    for folder in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        with pytest.raises(SystemExit) as exit:
            lmeval_main(["tasks", str(folder)])
        err = capsys.readouterr().err
        assert exit.value.code == 2 and err == (
            f"error: cannot write the tasks into {folder} ({tmp_path / 'afile'} is a file): pass a writable folder\n"
        )
    assert (tmp_path / "afile").read_text() == "x"


@pytest.mark.slow  # lm-eval's task index (~10 s); the default suite: the bad-input lines
def test_a_task_yaml_that_cannot_be_parsed_is_named(families, tmp_path, capsys):
    """Before: `selfsup_broken is not an lm-eval task` (lm-eval skips the file with a log line)."""
    (tmp_path / "mine").mkdir()
    broken = tmp_path / "mine" / "selfsup_broken.yaml"
    broken.write_text("task: selfsup_broken\ndataset_path: json\ndoc_to_text: [unclosed\n")
    with pytest.raises(SystemExit) as exit:
        main([str(families / "1"), "lm_eval.tasks=[selfsup_broken]", f"lm_eval.include_path=[{tmp_path / 'mine'}]"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: lm_eval.include_path: {broken} cannot be parsed as YAML (line 4: "), err
