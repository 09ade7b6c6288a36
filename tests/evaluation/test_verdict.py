"""The verdict's words on constructed outcomes: null results, a clear lead, a lead inside the seed spread, runs
that kept no outcomes; what was held equal."""

import zlib

import numpy as np
import pytest

from selfsup.common.names import OUTCOMES
from selfsup.evaluation.stats import difference, exam_difference, margin
from selfsup.results.groups import with_margins
from selfsup.results.verdict import NO_LEAD, held_equal, verdict_lines, verdict_text

N = 1000


def outcomes(rng, accuracy: float, n: int = N) -> np.ndarray:
    return (rng.random(n) < accuracy).astype(float)


def run(
    tmp_path,
    name: str,
    trained: np.ndarray,
    random_init: np.ndarray,
    objective: str,
    seed: int = 0,
    keep: bool = True,
    steps: int = 300,
    flops: float = 1.7e12,
    examples: str = "pairs-v1",
) -> dict:
    """A finished run's summary row whose eval/pairs margin is computed from the arrays (as Evaluation does), its
    outcomes kept in its run dir."""
    run_dir = tmp_path / name
    run_dir.mkdir()
    m = margin(trained, random_init)
    evaluated = {
        "eval/pairs/accuracy": float(trained.mean()),
        "eval/pairs/margin": m.value,
        "eval/pairs/margin_low": m.low,
        "eval/pairs/margin_high": m.high,
    }
    if keep:
        kept = {"eval/pairs": trained, "eval/pairs|random_init": random_init, "eval/pairs|examples": np.array(examples)}
        np.savez(run_dir / OUTCOMES, **with_margins(kept, evaluated))
    return {
        "status": "finished",
        "objective": objective,
        "swept": {"seed": seed},
        "run_dir": str(run_dir),
        "steps": steps,
        "tokens_seen": steps * 2048,
        "flops_seen": flops,
        "targets_seen": steps * 300,
        "pairs_scorers": {"eval/pairs": "summed log-prob"},
        "eval": evaluated,
    }


def test_identical_models_show_no_difference_at_this_scale(tmp_path):
    rng = np.random.default_rng(0)
    trained, base = outcomes(rng, 0.7), np.stack([outcomes(rng, 0.5) for _ in range(3)])
    rows = [run(tmp_path, "a", trained, base, "mlm"), run(tmp_path, "b", trained, base, "clm")]
    d = difference(trained, base, trained, base)
    assert d.value == d.low == d.high == 0  # the same outcomes and the same random-init models: exactly 0
    lines = verdict_lines(rows, width=10_000)
    assert lines[0] == (
        "Verdict (margin over random-init, 95% paired-bootstrap interval; held equal: 300 steps, "
        "614k tokens, 1.7e+12 FLOPs, 90k scored targets):"
    )
    text = verdict_text(rows)
    assert f"mlm - clm {d}: {NO_LEAD}" in text and " leads " not in text
    m = rows[0]["eval"]
    shown = f"{m['eval/pairs/margin']:+.3f} [{m['eval/pairs/margin_low']:+.3f}, {m['eval/pairs/margin_high']:+.3f}]"
    assert f"shows pretraining: mlm {shown}; clm {shown}." in text  # both above their random-init


def test_null_results_say_no_pretraining_shown_yet(tmp_path):
    rng = np.random.default_rng(1)
    base = np.stack([outcomes(rng, 0.5) for _ in range(3)])
    rows = [run(tmp_path, "a", outcomes(rng, 0.5), base, "mlm"), run(tmp_path, "b", outcomes(rng, 0.5), base, "clm")]
    [_, line] = verdict_lines(rows, width=10_000)
    assert line.startswith("  pairs: no pretraining shown yet: mlm ") and "shows pretraining" not in line
    assert line.endswith(NO_LEAD)


def test_a_margin_wholly_below_zero_says_random_init_does_better(tmp_path):
    """Before: worded like a null result ("no pretraining shown yet")."""
    rng = np.random.default_rng(1)
    base = np.stack([outcomes(rng, 0.6) for _ in range(3)])
    rows = [run(tmp_path, "a", outcomes(rng, 0.4), base, "span"), run(tmp_path, "b", outcomes(rng, 0.6), base, "clm")]
    m = rows[0]["eval"]
    assert m["eval/pairs/margin_high"] < 0 < m["eval/pairs/margin_low"] + 0.3  # (a clearly negative margin)
    [_, line] = verdict_lines(rows, width=10_000)
    shown = f"{m['eval/pairs/margin']:+.3f} [{m['eval/pairs/margin_low']:+.3f}, {m['eval/pairs/margin_high']:+.3f}]"
    assert f"random-init does better: span {shown}" in line
    assert "no pretraining shown yet: clm " in line and "no pretraining shown yet: span" not in line
    seeds = [run(tmp_path, f"s{k}", outcomes(rng, 0.4), base, "span", seed=k) for k in range(2)]
    assert "  pairs: random-init does better: span mean -0.2" in verdict_text(seeds)  # at every seed


def test_a_clear_lead_over_seeds_is_called_with_its_interval_and_spread(tmp_path):
    rng = np.random.default_rng(2)
    base = np.stack([outcomes(rng, 0.5) for _ in range(3)])
    rows = [
        run(tmp_path, f"{o}{s}", outcomes(rng, acc), base, o, seed=s)
        for o, acc in (("clm", 0.8), ("mlm", 0.6))
        for s in (0, 1, 2)
    ]
    text = verdict_text(rows)
    clm = [r["eval"]["eval/pairs/margin"] for r in rows[:3]]
    mlm = [r["eval"]["eval/pairs/margin"] for r in rows[3:]]
    spread = max(max(clm) - min(clm), max(mlm) - min(mlm))
    d = difference(
        np.mean([np.load(f"{r['run_dir']}/{OUTCOMES}")["eval/pairs"] for r in rows[:3]], axis=0),
        base,
        np.mean([np.load(f"{r['run_dir']}/{OUTCOMES}")["eval/pairs"] for r in rows[3:]], axis=0),
        base,
    )
    assert d.low > spread  # constructed: the lead is far outside both
    assert f"clm leads mlm by {d.value:.3f} (clm - mlm {d}; seed spread {spread:.3f})" in text
    assert (
        f"clm mean {np.mean(clm):+.3f} ({min(clm):+.3f} to {max(clm):+.3f} over 3 seeds, interval above 0 at 3 of 3 seeds)"
        in text
    )


def test_a_lead_inside_the_seed_spread_is_no_difference(tmp_path):
    rng = np.random.default_rng(3)
    base = np.stack([outcomes(rng, 0.5, 4000) for _ in range(3)])
    # mlm's seeds scatter by 0.2; clm sits 0.06 above mlm's mean: beyond the pooled interval, inside the spread
    rows = [
        run(tmp_path, f"mlm{s}", outcomes(rng, acc, 4000), base, "mlm", seed=s) for s, acc in enumerate((0.5, 0.6, 0.7))
    ]
    rows += [run(tmp_path, f"clm{s}", outcomes(rng, 0.66, 4000), base, "clm", seed=s) for s in range(3)]
    text = verdict_text(rows)
    mlm = [r["eval"]["eval/pairs/margin"] for r in rows[:3]]
    assert f"is within the seed spread ({max(mlm) - min(mlm):.3f}): {NO_LEAD}" in text and " leads " not in text
    assert "no pretraining shown yet: mlm mean" in text  # its seed 0 is at random-init: not at every seed


def test_one_seed_each_calls_no_lead_and_says_how_to_measure_it(tmp_path):
    rng = np.random.default_rng(4)
    base = np.stack([outcomes(rng, 0.5) for _ in range(3)])
    rows = [run(tmp_path, "a", outcomes(rng, 0.8), base, "clm"), run(tmp_path, "b", outcomes(rng, 0.6), base, "mlm")]
    rows.append(run(tmp_path, "c", outcomes(rng, 0.7), base, "ul2"))
    text = verdict_text(rows)
    d = [
        difference(
            np.load(f"{rows[0]['run_dir']}/{OUTCOMES}")["eval/pairs"],
            base,
            np.load(f"{r['run_dir']}/{OUTCOMES}")["eval/pairs"],
            base,
        )
        for r in rows[1:]
    ]
    assert text.endswith(
        f"clm - mlm {d[0]}; clm - ul2 {d[1]}: one seed each: the seed spread is not measured, so no "
        f"lead is called (add seed=0,1,2)"
    )  # said once for both
    assert " leads " not in text


def test_runs_without_outcomes_or_on_other_examples_are_not_bounded(tmp_path):
    rng = np.random.default_rng(5)
    base = np.stack([outcomes(rng, 0.5) for _ in range(3)])
    rows = [
        run(tmp_path, "a", outcomes(rng, 0.8), base, "clm"),
        run(tmp_path, "b", outcomes(rng, 0.6), base, "mlm", keep=False),
    ]
    assert "not bounded (no per-example outcomes kept): no lead called" in verdict_text(rows)
    rows[1] = run(tmp_path, "c", outcomes(rng, 0.6), base, "mlm", examples="pairs-v2")
    assert "not bounded (scored on other examples): no lead called" in verdict_text(rows)


def test_held_equal_names_what_differs():
    rows = [
        {"steps": 300, "tokens_seen": 614400, "flops_seen": f, "targets_seen": t}
        for f, t in ((1.7e12, 95_000), (3.4e12, 600_000))
    ]
    assert held_equal(rows) == (
        "held equal: 300 steps, 614k tokens; not equal: FLOPs 1.7e+12 to 3.4e+12, scored targets 95k to 600k"
    )
    rows = [{"steps": s, "flops_seen": f} for s, f in ((410, 2.500e12), (290, 2.512e12))]  # trainer.max_flops
    assert held_equal(rows) == "held equal: 2.5e+12 FLOPs (within 1%); not equal: steps 290 to 410"
    assert held_equal(rows[:1]) == "410 steps, 2.5e+12 FLOPs"


def test_a_failed_run_or_one_without_margins_gives_no_verdict(tmp_path):
    assert verdict_lines([{"status": "failed", "eval": {}}]) == []
    assert verdict_lines([{"status": "finished", "eval": {"eval/fixed/loss": 5.0}, "objective": "mlm"}]) == []


@pytest.mark.parametrize("width", [60, 100])
def test_lines_fit_the_width(tmp_path, width):
    rng = np.random.default_rng(6)
    base = np.stack([outcomes(rng, 0.5) for _ in range(3)])
    rows = [run(tmp_path, f"r{i}", outcomes(rng, 0.5 + i / 10), base, o) for i, o in enumerate(("mlm", "clm", "ul2"))]
    lines = verdict_lines(rows, width)
    assert all(len(line) <= width for line in lines)
    assert " ".join(" ".join(lines).split()) == " ".join(verdict_text(rows).split())


def test_the_verdict_names_each_run_it_left_out_and_why(tmp_path):
    rng = np.random.default_rng(7)
    base = np.stack([outcomes(rng, 0.5) for _ in range(3)])
    read = [run(tmp_path, f"r{i}", outcomes(rng, 0.6), base, o) for i, o in enumerate(("mlm", "clm"))]
    preempted = {"status": "preempted", "preempted_by": "SIGTERM", "steps": 76, "objective": "ul2", "run_dir": "s/2"}
    failed = {"status": "failed", "error": "error: CUDA out of memory", "run_dir": "s/3"}
    text = verdict_text([*read, preempted, failed])
    assert text.splitlines()[-1] == (
        "  left out: ul2 (2): preempted by SIGTERM at step 76; job (3): failed (error: CUDA out of memory)"
    )
    assert "left out" not in verdict_text(read)


@pytest.mark.parametrize(
    "damage,why",
    [
        ("truncated", "outcomes.npz unreadable (BadZipFile)"),
        ("shape", "outcomes.npz holds arrays of the wrong shape"),
        ("nan", "outcomes.npz holds values that are not finite"),
    ],
)
def test_outcomes_that_do_not_agree_with_the_summary_bound_nothing(tmp_path, damage, why):
    """A verdict never contradicts the margins printed beside it: altered, truncated or malformed outcomes leave
    that run's comparisons unbounded, with the reason, and the rest of the verdict is written."""
    rng = np.random.default_rng(8)
    base = np.stack([outcomes(rng, 0.5) for _ in range(3)])
    rows = [
        run(tmp_path, f"r{i}", outcomes(rng, a), base, o, seed=i)
        for i, (a, o) in enumerate([(0.9, "clm"), (0.5, "mlm")])
    ]
    path = tmp_path / "r1" / OUTCOMES
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    else:
        trained = outcomes(rng, 0.5)
        trained[0] = np.nan if damage == "nan" else trained[0]
        np.savez(path, **{"eval/pairs": trained if damage == "nan" else trained[:10], "eval/pairs|random_init": base})
        if damage == "nan":
            rows[1]["eval"]["eval/pairs/accuracy"] = None
    text = verdict_text(rows)
    assert "clm - mlm " in text and f", not bounded ({why}): no lead called" in text, text
    assert "shows pretraining: clm" in text  # the rest of the verdict stands


@pytest.mark.parametrize(
    "edit,why",
    [
        ("swapped", "outcomes do not match summary.json"),  # mlm's file holds clm's outcomes
        ("margin", "outcomes do not match summary.json's eval/pairs/margin"),  # 5.0 [4.9, 5.1] written by hand
        ("interval", "outcomes do not match summary.json's eval/pairs/margin_low"),  # only the interval widened
    ],
)
def test_a_run_whose_summary_contradicts_its_outcomes_is_left_out_and_named(tmp_path, edit, why):
    """A margin or interval edited in summary.json never reaches the verdict: the run is left out, with what
    disagrees; the other runs' verdict stands."""
    rng = np.random.default_rng(8)
    base = np.stack([outcomes(rng, 0.5) for _ in range(3)])
    rows = [run(tmp_path, f"r{i}", outcomes(rng, a), base, o) for i, (a, o) in enumerate([(0.9, "clm"), (0.6, "mlm")])]
    if edit == "swapped":
        (tmp_path / "r1" / OUTCOMES).write_bytes((tmp_path / "r0" / OUTCOMES).read_bytes())
    elif edit == "margin":
        rows[1]["eval"].update({"eval/pairs/margin": 5.0, "eval/pairs/margin_low": 4.9, "eval/pairs/margin_high": 5.1})
    else:
        rows[1]["eval"]["eval/pairs/margin_low"] -= 0.05
    text = verdict_text(rows)
    assert text.splitlines()[-1] == f"  left out: mlm (r1): {why}", text
    assert "shows pretraining: clm +0.4" in text and "mlm" not in "".join(text.splitlines()[:-1])
    assert verdict_text(rows[1:]) == (  # alone, it is still named: the verdict never shows its margin
        f"Verdict (margin over random-init, 95% paired-bootstrap interval):\n  left out: mlm (r1): {why}"
    )


def test_the_sweep_table_reads_outcomes_from_where_the_sweep_is_now(tmp_path):
    """A sweep moved or copied: its rows' outcomes are read from the folder given, not the run_dir it ran in."""
    from selfsup.common.names import RunSummary
    from selfsup.results.summary import read_summaries

    rng = np.random.default_rng(9)
    base = np.stack([outcomes(rng, 0.5) for _ in range(3)])
    row = run(tmp_path, "0", outcomes(rng, 0.8), base, "clm")
    RunSummary({**row, "run_dir": "/elsewhere/0"}).write(tmp_path / "0")
    [read] = read_summaries(tmp_path)
    assert read["run_dir"] == str(tmp_path / "0")


@pytest.mark.parametrize(
    "change,problem",
    [
        ({"steps": "300"}, "steps is '300', not a finite number"),
        ({"eval": {"eval/pairs/margin": float("nan")}}, "eval eval/pairs/margin is nan, not a finite number"),
        ({"eval": {"eval/pairs/margin": float("inf")}}, "eval eval/pairs/margin is inf, not a finite number"),
        ({"eval": [1, 2]}, "eval is a list, not {metric: number}"),
        ({"status": 3}, "status is 3, not text"),
    ],
)
def test_a_summary_with_values_of_the_wrong_type_is_refused_in_one_line_and_the_rest_is_read(tmp_path, change, problem):
    import json

    from selfsup.common.names import RunSummary
    from selfsup.results.summary import read_summaries, summary_table

    rng = np.random.default_rng(10)
    base = np.stack([outcomes(rng, 0.5) for _ in range(3)])
    good, bad = run(tmp_path, "0", outcomes(rng, 0.8), base, "clm"), run(tmp_path, "1", outcomes(rng, 0.8), base, "mlm")
    RunSummary(good).write(tmp_path / "0")
    (tmp_path / "1" / "summary.json").write_text(json.dumps({**bad, **change}))  # (json writes NaN as NaN)
    assert RunSummary.read(tmp_path / "1").problem == problem
    rows = read_summaries(tmp_path)
    assert rows[1] == {
        "status": "failed",
        "error": f"summary.json unreadable: {problem}",
        "run_dir": str(tmp_path / "1"),
    }
    assert "clm" in summary_table(rows) and "shows pretraining: clm" in verdict_text(rows)


# ------------------------------------------------------------------------------------------ the fixed exam
MEMBER = np.repeat([0, 1], 200)  # a panel of two members, 200 windows each
COUNT = np.random.default_rng(10).integers(10, 31, 400).astype(float)


def exam_run(tmp_path, name: str, loss_per_target: float, seed: int, rate, noise=0.3, unigram=6.0, **eval_) -> dict:
    """A finished encoder run whose fixed exam is computed from per-window sums (as Evaluation does), kept in its
    run dir; its loss per target drawn around loss_per_target."""
    from selfsup.evaluation.suite import exam_interval

    rng = np.random.default_rng([zlib.crc32(name.encode()), seed])
    nll = rng.normal(loss_per_target * COUNT, noise * np.sqrt(COUNT))
    windows = {"nll": nll, "count": COUNT, "member": MEMBER, "unigram": unigram * COUNT}
    run_dir = tmp_path / name
    run_dir.mkdir()
    np.savez(run_dir / OUTCOMES, **{f"eval/fixed|{k}": v for k, v in windows.items()}, **{"eval/fixed|examples": "x"})
    loss = np.mean([nll[MEMBER == m].sum() / COUNT[MEMBER == m].sum() for m in (0, 1)])
    return {
        "status": "finished",
        "objective": "mlm",
        "architecture": "encoder",
        "swept": {"objective.mask_rate": rate, "seed": seed},
        "run_dir": str(run_dir),
        "steps": 300,
        "eval": {"eval/fixed/loss": float(loss), **exam_interval(windows), **eval_},
    }


def test_the_fixed_exam_calls_the_lower_setting_with_its_interval_and_the_seed_spread(tmp_path):
    rows = [exam_run(tmp_path, f"a{s}", 5.0, s, 0.15) for s in range(3)]
    rows += [exam_run(tmp_path, f"b{s}", 5.2, s, 0.4) for s in range(3)]
    text = verdict_text(rows)
    [line] = [line for line in text.splitlines() if line.startswith("  fixed exam")]
    a, b = [[r["eval"]["eval/fixed/loss"] for r in rows[i : i + 3]] for i in (0, 3)]
    spread = max(max(a) - min(a), max(b) - min(b))
    kept = [np.load(f"{r['run_dir']}/{OUTCOMES}") for r in rows]
    d = exam_difference(
        np.mean([k["eval/fixed|nll"] for k in kept[:3]], axis=0),
        np.mean([k["eval/fixed|nll"] for k in kept[3:]], axis=0),
        COUNT,
        MEMBER,
    )
    assert d.high < 0 and abs(d.value) > spread
    assert line.startswith(
        f"  fixed exam (loss in nats, lower is better): mlm mask_rate=0.15 mean {np.mean(a):.3f} "
        f"({min(a):.3f} to {max(a):.3f} over 3 seeds); mlm mask_rate=0.4 mean {np.mean(b):.3f}"
    )
    assert (
        f"mlm mask_rate=0.15 is lower than mlm mask_rate=0.4 by {abs(d.value):.3f} (mlm mask_rate=0.15 - mlm "
        f"mask_rate=0.4 {d}; seed spread {spread:.3f})" in line
    )
    assert "unigram" not in line  # every run well below the unigram's 6.0 nats


def test_identical_exams_give_exactly_zero_and_no_difference(tmp_path):
    rows = [exam_run(tmp_path, "a", 5.0, 0, 0.15), exam_run(tmp_path, "b", 5.0, 0, 0.4)]
    np.savez(  # b's model is a's: the same per-window sums
        tmp_path / "b" / OUTCOMES, **dict(np.load(tmp_path / "a" / OUTCOMES))
    )
    rows[1]["eval"] = dict(rows[0]["eval"])
    text = verdict_text(rows)
    assert f"mlm mask_rate=0.15 - mlm mask_rate=0.4 +0.000 [+0.000, +0.000]: {NO_LEAD}" in text


def test_one_seed_each_and_other_families_call_no_lead(tmp_path):
    rows = [exam_run(tmp_path, "a", 5.0, 0, 0.15), exam_run(tmp_path, "b", 5.5, 0, 0.4)]
    other = exam_run(tmp_path, "c", 4.0, 0, 0.15)
    other.update(objective="clm", architecture="decoder")
    text = verdict_text([*rows, other])
    assert "fixed exam of encoder (loss in nats, lower is better): mlm mask_rate=0.15 " in text
    assert "one seed each: the seed spread is not measured, so no lead is called" in text
    assert "fixed exam of decoder (loss in nats, lower is better): clm mask_rate=0.15 " in text
    assert " is lower than " not in text and "clm mask_rate=0.15 - " not in text  # never across families


def test_runs_worse_than_the_unigram_are_told_so_in_words(tmp_path):
    rows = [exam_run(tmp_path, f"a{s}", 6.3, s, 0.15) for s in range(2)]
    rows += [exam_run(tmp_path, f"b{s}", 5.0, s, 0.4) for s in range(2)]
    text = verdict_text(rows)
    assert (
        "mlm mask_rate=0.15: worse than a unigram count model on the same targets at every seed: nothing beyond "
        "word frequencies learned yet" in text
    )
    assert "mlm mask_rate=0.4: worse" not in text


def test_pairs_below_the_count_models_are_told_so_in_words(tmp_path):
    rng = np.random.default_rng(11)
    base = np.stack([outcomes(rng, 0.5) for _ in range(3)])
    row = run(tmp_path, "a", outcomes(rng, 0.6), base, "clm")
    row["eval"].update(
        {"eval/pairs/accuracy_se": 0.015, "eval/pairs/unigram_accuracy": 0.7, "eval/pairs/bigram_accuracy": 0.8}
    )
    assert "clm: below a unigram count model's accuracy: nothing beyond word frequencies learned yet" in verdict_text(
        [row]
    )
    row["eval"]["eval/pairs/unigram_accuracy"] = 0.61  # within 1.96 standard errors: not said
    text = verdict_text([row])
    assert "below a unigram" not in text and "clm: below a bigram count model's accuracy" in text


def test_exam_sums_that_contradict_the_summary_leave_the_run_out(tmp_path):
    rows = [exam_run(tmp_path, f"a{s}", 5.0, s, 0.15) for s in range(2)]
    rows += [exam_run(tmp_path, f"b{s}", 5.5, s, 0.4) for s in range(2)]
    rows[3]["eval"]["eval/fixed/loss"] += 0.1  # the summary says another loss than its sums
    text = verdict_text(rows)
    assert text.splitlines()[-1] == "  left out: mlm mask_rate=0.4 (b1): fixed exam outcomes do not match summary.json"


def test_a_difference_between_families_on_the_pairs_says_the_scorers_differ(tmp_path):
    rng = np.random.default_rng(12)
    base = np.stack([outcomes(rng, 0.5) for _ in range(3)])
    rows = [run(tmp_path, "a", outcomes(rng, 0.8), base, "clm"), run(tmp_path, "b", outcomes(rng, 0.6), base, "mlm")]
    rows[1]["pairs_scorers"] = {"eval/pairs": "pseudo-log-likelihood"}
    text = verdict_text(rows)
    assert text.endswith(
        "the scorers differ (summed log-prob; pseudo-log-likelihood): the margins over random-init compare, raw "
        "accuracies do not"
    )
    rows[1]["pairs_scorers"] = {"eval/pairs": "summed log-prob"}
    assert "scorers differ" not in verdict_text(rows)


def test_the_held_out_text_is_compared_in_bits_per_byte_within_a_family(tmp_path):
    """The held-out text's section: per-document sums in nats over bytes, the difference in bits per byte."""
    import math

    from selfsup.evaluation.heldout import heldout_metrics

    docs = np.random.default_rng(13).integers(200, 2000, 60).astype(float)  # bytes per document
    member = np.zeros(60, dtype=np.int16)
    rows, sums = [], []
    for name, bpb, seed in [(f"{r}{s}", b, s) for r, b in (("a", 1.2), ("b", 1.5)) for s in range(2)]:
        rng = np.random.default_rng([zlib.crc32(name.encode()), seed])
        nll = rng.normal(bpb * math.log(2) * docs, 0.05 * np.sqrt(docs))
        kept = {"nll": nll, "count": docs, "member": member}
        run_dir = tmp_path / name
        run_dir.mkdir()
        np.savez(
            run_dir / OUTCOMES, **{f"eval/heldout|{k}": v for k, v in kept.items()}, **{"eval/heldout|examples": "t"}
        )
        rate = 0.15 if name.startswith("a") else 0.4
        rows.append(
            {
                "status": "finished",
                "objective": "clm",
                "architecture": "decoder",
                "swept": {"objective.mask_rate": rate, "seed": seed},
                "run_dir": str(run_dir),
                "eval": heldout_metrics(kept),
            }
        )
        sums.append(nll)
    text = verdict_text(rows)
    d = exam_difference(np.mean(sums[:2], axis=0), np.mean(sums[2:], axis=0), docs, member)
    assert text.splitlines()[1].startswith("  held-out text (bits per byte, lower is better): clm mask_rate=0.15 mean")
    assert f"is lower than clm mask_rate=0.4 by {abs(d.value) / math.log(2):.3f}" in text
    assert -d.value / math.log(2) == pytest.approx(0.3, abs=0.01)


def test_a_studys_verdict_compares_the_best_trial_with_random_init_and_the_runner_up_only(tmp_path):
    """Trials of an Optuna study (optuna.db in their sweep dir): one line per score, not every trial against
    every other (the table has them all)."""
    rng = np.random.default_rng(14)
    base = np.stack([outcomes(rng, 0.5) for _ in range(3)])
    sweep = tmp_path / "study"
    sweep.mkdir()
    (sweep / "optuna.db").write_bytes(b"")
    rows = []
    for i, acc in enumerate((0.5, 0.8, 0.6, 0.7)):
        row = run(sweep, str(i), outcomes(rng, acc), base, "mlm")
        row["swept"] = {"objective.mask_rate": 0.1 * (i + 1)}
        rows.append(row)
    text = verdict_text(rows)
    [line] = [line for line in text.splitlines() if line.startswith("  pairs: ")]
    assert line.startswith("  pairs: 3 of 4 trials show pretraining. best mlm mask_rate=0.2 +0.")
    assert "(shows pretraining). against the runner-up: mlm mask_rate=0.2 - mlm mask_rate=0.4 " in line
    assert "mask_rate=0.1" not in line and "mask_rate=0.3" not in line


def test_a_margin_from_too_few_test_examples_is_not_called(tmp_path):
    """Issue 66: one generation test example gave `shows pretraining: clm +0.015 [+0.013, +0.018]` (a bootstrap over
    one example sees no sampling error). Below MIN_EXAMPLES the verdict says so, whatever the interval."""
    from selfsup.evaluation.stats import MIN_EXAMPLES

    rows = []
    for name, n, objective in (("a", 1, "clm"), ("b", 2, "mlm"), ("c", MIN_EXAMPLES, "span_corruption")):
        trained, base = np.ones(n), np.zeros((3, n))
        row = run(tmp_path, name, trained, base, objective)
        row["eval"]["eval/pairs/margin_examples"] = float(n)
        rows.append(row)
    text = verdict_text(rows)
    assert "too few test examples (1, fewer than 20) to call: clm +1.000 [+1.000, +1.000]" in text, text
    assert "too few test examples (2, fewer than 20) to call: mlm +1.000 [+1.000, +1.000]" in text, text
    assert "shows pretraining: span_corruption +1.000 [+1.000, +1.000]" in text, text
    assert "clm -" not in text and "mlm -" not in text  # nor compared


def test_a_ranking_that_changes_with_the_scoring_method_is_said(tmp_path):
    """GPT-BERT's pairs scored both ways: by causal log-prob clm leads it, by its MNTP pseudo-log-likelihood it leads
    clm (constructed), each bounded beyond the seed spread: the verdict says the ranking changes."""
    rng = np.random.default_rng(5)
    base = np.stack([outcomes(rng, 0.5) for _ in range(3)])
    rows = [run(tmp_path, f"clm{s}", outcomes(rng, 0.75), base, "clm", seed=s) for s in (0, 1, 2)]
    for s in (0, 1, 2):
        row = run(tmp_path, f"gb{s}", outcomes(rng, 0.6), base, "gpt_bert", seed=s)
        mntp = outcomes(rng, 0.9)
        m = margin(mntp, base)
        row["eval"].update({"eval/pairs/mntp/margin": m.value, "eval/pairs/mntp/margin_low": m.low})
        row["eval"].update({"eval/pairs/mntp/margin_high": m.high, "eval/pairs/mntp/accuracy": float(mntp.mean())})
        row["pairs_scorers"]["eval/pairs/mntp"] = "MNTP pseudo-log-likelihood"
        path = f"{row['run_dir']}/{OUTCOMES}"
        kept = dict(np.load(path))
        kept.update({"eval/pairs/mntp": mntp, "eval/pairs/mntp|random_init": base})
        kept["eval/pairs/mntp|examples"] = np.array("pairs-v1")
        np.savez(path, **with_margins(kept, row["eval"]))
        rows.append(row)
    text = verdict_text(rows)
    assert "clm leads gpt_bert by " in text  # the causal scorer
    mean = lambda name, key: np.mean([np.load(f"{tmp_path}/{name}{s}/{OUTCOMES}")[key] for s in (0, 1, 2)], axis=0)  # noqa: E731
    d = difference(mean("gb", "eval/pairs/mntp"), base, mean("clm", "eval/pairs"), base)
    assert d.low > 0.1
    assert (
        f"by MNTP pseudo-log-likelihood: gpt_bert - clm {d}; the ranking of gpt_bert and clm changes with the scoring method"
        in text
    )
    # the same ranking both ways: nothing said of a change
    same = [r for r in rows if r["objective"] == "clm"] + [
        run(tmp_path, f"x{s}", outcomes(rng, 0.6), base, "prefix_lm", seed=s) for s in (0, 1, 2)
    ]
    assert "changes with the scoring method" not in verdict_text(same) and "by MNTP" not in verdict_text(same)
