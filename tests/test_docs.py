"""python -m selfsup.report.docs: the measured blocks of README.md, docs/results.md and docs/evaluation.md, rewritten
from a sweep; the rest of each file kept; bad blocks refused with nothing written."""

import json
import re
import shutil
from pathlib import Path

import pytest

from selfsup.report.docs import BLOCKS, FILES, MARK, blocks, main, rewrite
from selfsup.results.summary import summary_table

ROOT = Path(__file__).parents[1]


def row(objective: str, margin: float, run_dir: Path) -> dict:
    return {
        "status": "finished",
        "objective": objective,
        "architecture": "encoder",
        "swept": {},
        "run_dir": str(run_dir),
        "steps": 300,
        "tokens_seen": 614400,
        "flops_seen": 1.7e12,
        "targets_seen": 95000,
        "val_loss": 6.2,
        "wall_seconds": 60.0,
        "eval_seconds": 12.0,
        "eval_part_seconds": {"fixed": 0.3, "pairs": 9.0, "probe": 2.7},
        "pairs_scorers": {"eval/pairs": "pseudo-log-likelihood"},
        "eval": {
            "eval/fixed/loss": 6.0,
            "eval/fixed/masked/loss": 6.5,
            "eval/fixed/masked/fraction": 0.8,
            "eval/fixed/masked/unigram_loss": 6.6,
            "eval/fixed/random/loss": 6.9,
            "eval/fixed/random/fraction": 0.1,
            "eval/fixed/random/unigram_loss": 6.6,
            "eval/fixed/unchanged/loss": 2.1,
            "eval/fixed/unchanged/fraction": 0.1,
            "eval/fixed/unchanged/unigram_loss": 6.7,
            "eval/pairs/accuracy": 0.5 + margin,
            "eval/pairs/random_init_accuracy": 0.5,
            "eval/pairs/random_init_accuracy_sd": 0.01,
            "eval/pairs/margin": margin,
            "eval/pairs/margin_low": margin - 0.02,
            "eval/pairs/margin_high": margin + 0.02,
        },
    }


@pytest.fixture
def repo(tmp_path) -> Path:
    """A repository root with both files, each with blocks and text around them, and a finished sweep."""
    for name in FILES:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"# {name}\nbefore\n<!-- {MARK}:console -->\nold\n<!-- /{MARK}:console -->\nbetween\n"
            f"<!-- {MARK}:cost -->\nold\n<!-- /{MARK}:cost -->\nafter\n"
        )
    sweep = tmp_path / "sweep"
    for job, (objective, margin) in enumerate((("mlm", 0.01), ("clm", 0.3))):
        (sweep / str(job)).mkdir(parents=True)
        (sweep / str(job) / "summary.json").write_text(json.dumps(row(objective, margin, sweep / str(job))))
    return tmp_path


def test_the_blocks_are_replaced_and_the_rest_kept(repo, capsys):
    main(["--root", str(repo), "--sweep", str(repo / "sweep")])
    rows = [json.loads((repo / "sweep" / str(j) / "summary.json").read_text()) for j in (0, 1)]
    found = blocks(rows)
    for name in FILES:
        text = (repo / name).read_text()
        assert text.startswith(f"# {name}\nbefore\n") and "\nbetween\n" in text and text.endswith("after\n")
        assert "\nold\n" not in text and summary_table(rows) in text  # the sweep's own table
        assert f"<!-- {MARK}:cost -->\n{found['cost']}\n<!-- /{MARK}:cost -->" in text
        assert "pairs: shows pretraining: clm +0.300 [+0.280, +0.320]. no pretraining shown yet: mlm +0.010" in text
    assert "| minimal pairs | 9.0 | 9.0 |" in found["cost"]
    assert "| mlm | unchanged | 10.0% | 2.10 | 6.70 |" in found["fixed-split"]
    assert "rewrote" in capsys.readouterr().out


@pytest.mark.parametrize(
    "broken,message",
    [
        (f"<!-- {MARK}:console -->\nno end\n", "has no <!-- /selfsup.report.docs:NAME --> after it"),
        (f"<!-- {MARK}:nonsense -->\nx\n<!-- /{MARK}:nonsense -->\n", "unknown block 'nonsense'"),
    ],
)
def test_a_bad_block_is_refused_and_nothing_is_written(repo, capsys, broken, message):
    readme = repo / "README.md"
    readme.write_text(readme.read_text() + broken)
    before = {name: (repo / name).read_text() for name in FILES}
    with pytest.raises(SystemExit) as exit_:
        main(["--root", str(repo), "--sweep", str(repo / "sweep")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1
    assert {name: (repo / name).read_text() for name in FILES} == before


def test_a_sweep_that_is_not_finished_is_refused(repo, capsys):
    (repo / "sweep" / "2").mkdir()
    (repo / "sweep" / "2" / "error.txt").write_text("error: boom")
    with pytest.raises(SystemExit):
        main(["--root", str(repo), "--sweep", str(repo / "sweep")])
    assert "holds no finished sweep" in capsys.readouterr().err


def test_the_repositorys_blocks_are_all_known():
    """Each file the command rewrites: every block opened is closed and is one the command writes."""
    names = set(BLOCKS)
    for name in FILES:
        text = (ROOT / name).read_text()
        found = re.findall(rf"<!-- {re.escape(MARK)}:([\w-]+) -->", text)
        assert found and set(found) <= names, name
        rewrite(text, {n: "x" for n in names}, name)  # raises on a block without its end


def test_every_file_with_a_block_is_one_the_command_rewrites():
    """A block moved into another page of docs/ is still regenerated: the file is in FILES."""
    holding = {
        str(path.relative_to(ROOT))
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        if f"<!-- {MARK}:" in path.read_text()
    }
    assert holding == set(FILES)


def test_the_seeds_block_is_kept_unless_seeds_are_given(repo):
    doc = repo / "docs" / "evaluation.md"
    doc.write_text(doc.read_text() + f"<!-- {MARK}:seeds -->\nearlier seeds\n<!-- /{MARK}:seeds -->\n")
    main(["--root", str(repo), "--sweep", str(repo / "sweep")])
    assert "\nearlier seeds\n" in doc.read_text()  # no seeds run: the block as it was
    seeds = repo / "seeds"
    for job, (objective, margin, seed) in enumerate((("mlm", 0.02, 1), ("clm", 0.31, 1))):
        (seeds / str(job)).mkdir(parents=True)
        summary = {**row(objective, margin, seeds / str(job)), "swept": {"seed": seed}}
        (seeds / str(job) / "summary.json").write_text(json.dumps(summary))
    main(["--root", str(repo), "--sweep", str(repo / "sweep"), "--seeds-sweep", str(seeds)])
    text = doc.read_text()
    assert "earlier seeds" not in text and "| clm | 1 | 6.200 | +0.310 [+0.290, +0.330] | - | 60 s |" in text
    # two seeds per objective: each objective's margins over its seeds, the difference beside their spread
    assert "clm mean +0.305 (+0.300 to +0.310 over 2 seeds, interval above 0 at 2 of 2 seeds)" in " ".join(text.split())


def test_the_downstream_block_is_written_from_the_runs_evaluated_scores(repo):
    """selfsup-eval's evaluated.json beside each run: each task's fine-tuned accuracy, baselines and margin per
    objective and seed, each run's selfsup-eval seconds, and the verdict over them; no evaluated run, no block."""
    doc = repo / "docs" / "evaluation.md"
    doc.write_text(doc.read_text() + f"<!-- {MARK}:downstream -->\nearlier\n<!-- /{MARK}:downstream -->\n")
    main(["--root", str(repo), "--sweep", str(repo / "sweep")])
    assert "\nearlier\n" in doc.read_text()  # no run evaluated: the block as it was
    for job, (margin, seconds) in enumerate(((0.01, 496.0), (0.2, 300.0))):
        scores = {
            "eval/next_sentence/accuracy": 0.5 + margin,
            "eval/next_sentence/accuracy_sd": 0.02,
            "eval/next_sentence/random_init_accuracy": 0.5,
            "eval/next_sentence/random_init_accuracy_sd": 0.03,
            "eval/next_sentence/majority_accuracy": 0.498,
            "eval/next_sentence/margin": margin,
            "eval/next_sentence/margin_low": margin - 0.05,
            "eval/next_sentence/margin_high": margin + 0.05,
        }
        evaluated = {"eval": scores, "pairs_scorers": {}, "evaluations": [{"seconds": seconds}]}
        (repo / "sweep" / str(job) / "evaluated.json").write_text(json.dumps(evaluated))
    main(["--root", str(repo), "--sweep", str(repo / "sweep")])
    text = doc.read_text()
    assert "earlier" not in text
    assert "| next_sentence | clm | 0 | 0.700 ± 0.020 | 0.500 ± 0.030 | 0.498 | +0.200 [+0.150, +0.250] |" in text
    assert "| next_sentence | mlm | 0 | 0.510 ± 0.020 | 0.500 ± 0.030 | 0.498 | +0.010 [-0.040, +0.060] |" in text
    assert "| the run's evaluations | 300 | 496 |" in text  # clm then mlm, as the rows
    flat = " ".join(text.split())
    assert "next_sentence: shows pretraining: clm +0.200 [+0.150, +0.250]. no pretraining shown yet: mlm" in flat
    assert "eval/pairs" not in text.split(f"<!-- {MARK}:downstream -->")[1]  # the training-time scores stay out


def test_the_downstream_block_answers_which_objective_for_which_job(repo):
    """The objective x job table: each task's and generation job's mean margin over seeds and at how many seeds
    it shows pretraining; an encoder's generation cells say it writes no text; each part's seconds."""
    doc = repo / "docs" / "evaluation.md"
    doc.write_text(doc.read_text() + f"<!-- {MARK}:downstream -->\nearlier\n<!-- /{MARK}:downstream -->\n")
    clm = repo / "sweep" / "1" / "summary.json"
    clm.write_text(json.dumps({**json.loads(clm.read_text()), "architecture": "decoder"}))
    task = {"eval/probe2/accuracy": 0.6, "eval/probe2/margin": 0.1}
    task |= {"eval/probe2/margin_low": 0.05, "eval/probe2/margin_high": 0.15}
    (repo / "sweep" / "0" / "evaluated.json").write_text(
        json.dumps({"eval": task, "evaluations": [{"seconds": 40.0, "not_written": {"cont": "x"}}]})
    )
    job = {f"eval/cont/{s}": v for s, v in (("loss", 4.0), ("exact_match", 0.0), ("token_f1", 0.1))}
    job |= {"eval/cont/random_init_loss": 5.0, "eval/cont/random_init_token_f1": 0.02}
    for score, (m, low) in {"loss": (1.0, 0.8), "exact_match": (0.0, 0.0), "token_f1": (0.08, -0.01)}.items():
        job |= {f"eval/cont/{score}/margin": m, f"eval/cont/{score}/margin_low": low}
        job[f"eval/cont/{score}/margin_high"] = m + 0.2
    parts = {"probe": 20.0, "generation": 70.0, "cont": 50.0}
    (repo / "sweep" / "1" / "evaluated.json").write_text(
        json.dumps({"eval": {**task, **job}, "evaluations": [{"seconds": 90.0, "part_seconds": parts}]})
    )
    main(["--root", str(repo), "--sweep", str(repo / "sweep")])
    text = doc.read_text()
    assert (
        "| objective | probe2 accuracy | cont loss | cont F1 | cont exact match |\n"
        "|---|---:|---:|---:|---:|\n"
        "| clm | +0.100 (1/1) | +1.000 (1/1) | +0.080 (0/1) | +0.000 (0/1) |\n"
        "| mlm | +0.100 (1/1) | an encoder does not write text | an encoder does not write text | an encoder does "
        "not write text |"
    ) in text
    assert "| cont | clm | 0 | 4.000 | 5.000 | +1.000 [+0.800, +1.200] | 0.000 | +0.000 [+0.000, +0.200] |" in text
    assert "| generation | 70 | - |" in text and "| cont | 50 | - |" in text
    assert "cont loss (random-init's minus the run's): shows pretraining: clm +1.000 [+0.800, +1.200]" in text
    between = repo / "between" / "0"  # --between: a sweep of other objectives joins the block
    shutil.copytree(repo / "sweep" / "1", between)
    summary = json.loads((between / "summary.json").read_text())
    (between / "summary.json").write_text(json.dumps({**summary, "objective": "prefix_lm", "run_dir": str(between)}))
    main(["--root", str(repo), "--sweep", str(repo / "sweep"), "--between", str(repo / "between")])
    assert "| prefix_lm | +0.100 (1/1) | +1.000 (1/1) | +0.080 (0/1) | +0.000 (0/1) |" in doc.read_text()
