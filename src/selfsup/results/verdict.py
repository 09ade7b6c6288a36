"""The verdict: which runs show pretraining and which setting leads, with the uncertainty of each claim.

One function, `verdict_lines(rows)`, computes it from run summaries (summary.json dicts) and, for the
comparisons, the per-example outcomes each run keeps in `<run_dir>/outcomes.npz`; the end of a run, the
end of a sweep, `selfsup-report` and the W&B summary (`verdict`) print what it returns.

Every score is read as a margin over its own random-init baselines (the same scorer on untrained models
of the run's shape) with its paired bootstrap 95% interval (selfsup.evaluation.stats); raw accuracies of
different families are never ranked. Runs of the same setting at different seeds form one group.

    shows pretraining      the interval lies above 0 at every seed of the group
    random-init does better
                           the interval lies below 0 at every seed of the group (untrained models of the run's
                           shape score higher); otherwise: no pretraining shown yet
    A leads B              the difference of their margins has an interval that excludes 0 and exceeds
                           the seed spread (the larger range of either group's margins over its seeds)
    no difference at this scale
                           the interval of the difference holds 0, or the difference is within the seed
                           spread; with one seed per group the spread is not measured and no lead is called
    too few test examples (n) to call
                           a margin measured on fewer than MIN_EXAMPLES (20) test examples (`<score>/margin_examples`):
                           neither shown nor compared, whatever its interval (a bootstrap over 1 or 2 examples
                           cannot see the test set's sampling error)

The fixed exam (eval/fixed/loss) and the held-out text (eval/heldout/bits_per_byte) are losses, not margins,
and the same only within a family (the exams and the scorers differ between families): the section of each, per
family, gives each group's score with its bootstrap 95% interval over the exam's windows (the text's
documents) and compares the lowest with each other group, paired over the same windows and masks (documents)
(selfsup.evaluation.stats.exam_difference), with the same rules: "A is lower than B by d [lo, hi]" only when
the interval excludes 0 and |d| exceeds the seed spread (the larger range of either group's losses over its
seeds), else "no difference at this scale".

References in words: a group whose every run scores the exam worse than the training split's unigram on the
same targets (eval/fixed/unigram_gap's interval above 0), or the pairs below the unigram or bigram counts'
accuracy by more than 1.96 standard errors, is said to be so in words; so is a task's accuracy below the simple
baseline's (TF-IDF + logistic regression, `<task>/vs_tfidf`: its interval below 0 at every seed).

The first line says what the runs held equal (steps, input tokens, FLOPs) and what they did not; the last
names each run it left out and why (preempted, interrupted, failed, pruned, no scores).
"""

from __future__ import annotations

import json
import os
import statistics
import textwrap
from pathlib import Path

from selfsup.evaluation.simple import SIMPLE
from selfsup.evaluation.stats import MIN_EXAMPLES, Interval, difference, exam_difference
from selfsup.results.groups import (
    SITTINGS,
    Contradiction,
    Group,
    Sitting,
    exam_mean,
    exam_of,
    exam_spread,
    groups_of,
    load_outcomes,
    pooled,
    pooled_exam,
    same_exam,
    score_keys,
    setting_label,
)
from selfsup.results.settings import by_settings

VERDICT = "verdict.json"  # a sweep's, in its sweep dir
EQUAL_WITHIN = 0.01  # FLOPs and tokens differ by up to a step when trainer.max_flops / max_tokens stops a run
NO_LEAD = "no difference at this scale"
VERDICT_HEAD = "Verdict (margin over random-init, 95% paired-bootstrap interval"


def score_label(key: str) -> str:
    """`eval/probe` -> probe; a generation job's loss says its margin's direction."""
    label = key.removeprefix("eval/").replace("/", " ")
    return label + " (random-init's minus the run's)" if is_job_loss(key) else label


def is_job_loss(key: str) -> bool:
    """Whether `key` is a generation job's loss (eval/<job>/loss), whose margin is random-init's minus the run's."""
    return key.count("/") == 2 and key.endswith("/loss") and not key.startswith("eval/pairs/")


# ------------------------------------------------------------------------------------------ what was held equal
def count(value: float) -> str:
    """A count in 3 digits: 950, 95.2k, 1.23M, 4.5G."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.0f}"


def _amount(name: str, value: float) -> str:
    if name == "steps":
        return f"{value:,.0f} steps"
    if name == "FLOPs":
        return f"{value:.2g} FLOPs"
    return f"{count(value)} {name}"


def held_equal(rows: list[dict]) -> str:
    """`held equal: 300 steps, 0.614M tokens; not equal: FLOPs 1.7e+12 to 3.4e+12, scored targets ...` (one run:
    its amounts)."""
    same, differ = [], []
    for key, name in (
        ("steps", "steps"),
        ("tokens_seen", "tokens"),
        ("flops_seen", "FLOPs"),
        ("targets_seen", "scored targets"),
    ):
        # a continued run counts its whole chain (selfsup.run.continued)
        values = [float(r.get(f"chain_{key}", r[key])) for r in rows if isinstance(r.get(key), (int, float))]
        if not values:
            continue
        low, high = min(values), max(values)
        if high <= low * (1 + EQUAL_WITHIN) or high == low:
            same.append(_amount(name, statistics.fmean(values)) + ("" if high == low else " (within 1%)"))
        else:
            differ.append(
                f"{name} {_amount(name, low).removesuffix(' ' + name)} to "
                f"{_amount(name, high).removesuffix(' ' + name)}"
            )
    if len(rows) == 1:
        return ", ".join(same)
    text = "held equal: " + (", ".join(same) or "none of steps, tokens, FLOPs")
    return text + ("; not equal: " + ", ".join(differ) if differ else "")


# ------------------------------------------------------------------------------------------ comparisons
ONE_SEED = "the seed spread is not measured, so no lead is called (add seed=0,1,2)"


def compare(a: Group, b: Group, key: str, outcomes: dict) -> tuple[str, str | None]:
    """(the difference of a's and b's margins on `key` and what it says, or it alone and a note shared by the
    comparisons it ends with: one seed)."""
    x, y = pooled(a, key, outcomes), pooled(b, key, outcomes)
    if x is None or y is None or isinstance(x, str) or isinstance(y, str) or x[2] != y[2]:
        gap = statistics.fmean(m.value for m in a.margins(key)) - statistics.fmean(m.value for m in b.margins(key))
        problems = [p for p in (x, y) if isinstance(p, str)]
        why = (
            problems[0]
            if problems
            else "scored on other examples"
            if x is not None and y is not None
            else "no per-example outcomes kept"
        )
        return f"{a.label} - {b.label} {gap:+.3f}, not bounded ({why}): no lead called", None
    d = difference(x[0], x[1], y[0], y[1])
    return ruling(a, b, d, a.spread(key), b.spread(key), "leads")


SECOND_SCORERS = {"eval/pairs": "eval/pairs/mntp"}  # a score and the second scorer some runs also have (GPT-BERT)


def scoring_flips(groups: list[Group], key: str, outcomes: dict) -> str | None:
    """`by gpt_bert's MNTP pseudo-log-likelihood: gpt_bert - clm +0.041 [...]; the ranking of gpt_bert and clm
    changes with the scoring method`: the margins of the groups scored a second way (SECOND_SCORERS) against each
    other group's, paired over the same pairs; the ranking is said to change only where both differences are
    bounded (their intervals exclude 0 and exceed the seed spread) with opposite signs. None where no group has a
    second scorer."""
    second = SECOND_SCORERS.get(key)
    twice = [g for g in groups if second and len(g.margins(second)) == len(g.rows)]
    if not twice:
        return None
    found, flips = [], []
    for a in twice:
        for b in [g for g in groups if g is not a]:
            x, y = pooled(a, second, outcomes), pooled(b, key, outcomes)
            if x is None or y is None or isinstance(x, str) or isinstance(y, str) or x[2] != y[2]:
                continue
            d = difference(x[0], x[1], y[0], y[1])
            found.append(f"{a.label} - {b.label} {d}")
            x1 = pooled(a, key, outcomes)
            if x1 is None or isinstance(x1, str) or x1[2] != y[2]:
                continue
            d1 = difference(x1[0], x1[1], y[0], y[1])
            signs = (
                lead_sign(a, b, d1, a.spread(key), b.spread(key)),
                lead_sign(a, b, d, a.spread(second), b.spread(key)),
            )
            if 0 not in signs and signs[0] != signs[1]:
                flips.append(f"the ranking of {a.label} and {b.label} changes with the scoring method")
    if not found:
        return None
    scorer = (twice[0].rows[0].get("pairs_scorers") or {}).get(second, second.rpartition("/")[2])
    return f"by {scorer}: " + "; ".join(found + flips)


def scorers_differ(groups: list[Group], key: str) -> str | None:
    """`the scorers differ (summed log-prob; pseudo-log-likelihood): ...` where the groups' pairs were scored by
    different scorers (families), else None."""
    scorers = [(g.rows[0].get("pairs_scorers") or {}).get(key) for g in groups]
    names = list(dict.fromkeys(s for s in scorers if s))
    if len(names) < 2:
        return None
    return f"the scorers differ ({'; '.join(names)}): the margins over random-init compare, raw accuracies do not"


def lead_sign(a: Group, b: Group, d: Interval, spread_a, spread_b) -> int:
    """+1 where a leads b on d = a - b by the rules of `ruling` (the interval excludes 0, both groups have seeds,
    |d| exceeds the seed spread), -1 where b leads a, 0 where no lead is called."""
    if not d.excludes_zero or len(a.rows) < 2 or len(b.rows) < 2:
        return 0
    if abs(d.value) <= max(s for s in (spread_a, spread_b) if s is not None):
        return 0
    return 1 if d.value > 0 else -1


def ruling(a: Group, b: Group, d: Interval, spread_a, spread_b, verb: str) -> tuple[str, str | None]:
    """The rules on the difference d = a - b of two groups: no difference (the interval holds 0, or |d| within the
    seed spread), no lead called (one seed), or `a <verb> b by |d|` (verb "leads": d > 0 is better; "is lower
    than": d < 0 is better)."""
    if not d.excludes_zero:
        return f"{a.label} - {b.label} {d}: {NO_LEAD}", None
    if len(a.rows) < 2 or len(b.rows) < 2:
        return (
            f"{a.label} - {b.label} {d}",
            f"one seed {'each' if len(a.rows) == len(b.rows) else 'in one'}: {ONE_SEED}",
        )
    spread = max(s for s in (spread_a, spread_b) if s is not None)
    if abs(d.value) <= spread:
        return f"{a.label} - {b.label} {d} is within the seed spread ({spread:.3f}): {NO_LEAD}", None
    better = d.value > 0 if verb == "leads" else d.value < 0
    leader, other = (a, b) if better else (b, a)
    return (
        f"{leader.label} {verb} {other.label} by {abs(d.value):.3f} ({a.label} - {b.label} {d}; seed spread "
        f"{spread:.3f})"
    ), None


# ------------------------------------------------------------------------------------------ the fixed exam, the text
def compare_exam(a: Group, b: Group, sitting: Sitting, outcomes: dict) -> tuple[str, str | None]:
    """(a's score minus b's and what it says: the rules of `ruling`, lower is better)."""
    x, y = pooled_exam(a, sitting, outcomes), pooled_exam(b, sitting, outcomes)
    if x is None or y is None or isinstance(x, str) or isinstance(y, str) or not same_exam(x, y):
        problems = [p for p in (x, y) if isinstance(p, str)]
        why = (
            problems[0]
            if problems
            else f"other {sitting.title}s"
            if x is not None and y is not None
            else f"no {sitting.units} kept"
        )
        gap = exam_mean(a, sitting) - exam_mean(b, sitting)
        return f"{a.label} - {b.label} {gap:+.3f}, not bounded ({why}): no lead called", None
    d = exam_difference(x[0], y[0], x[1], x[2]).scaled(sitting.scale)
    return ruling(a, b, d, exam_spread(a, sitting), exam_spread(b, sitting), "is lower than")


def describe_exam(group: Group, sitting: Sitting) -> str:
    found = [exam_of(row, sitting) for row in group.rows]
    if len(found) == 1:
        return f"{group.label} {found[0]}"
    values = [m.value for m in found]
    return (
        f"{group.label} mean {statistics.fmean(values):.3f} ({min(values):.3f} to {max(values):.3f} over "
        f"{len(found)} seeds)"
    )


def worse_than_unigram(group: Group, sitting: Sitting) -> bool:
    """Every run of the group scores worse than the unigram counts on the same targets (the interval of
    <prefix>/unigram_gap above 0)."""
    lows = [(row.get("eval") or {}).get(f"{sitting.prefix}/unigram_gap_low") for row in group.rows]
    return all(low is not None and low > 0 for low in lows)


def exam_lines(groups: list[Group], outcomes: dict, width: int, study: bool = False) -> list[str]:
    """Per sitting and family, its section (see the module's doc); of a study, the lowest trial against the
    runner-up only."""
    lines = []
    for sitting in SITTINGS:
        families: dict[str, list[Group]] = {}
        for g in groups:
            if all(exam_of(row, sitting) is not None for row in g.rows):
                families.setdefault(str(g.rows[0].get("architecture")), []).append(g)
        for family, members in families.items():
            members.sort(key=lambda g: exam_mean(g, sitting))
            head = f"{sitting.title}" + (f" of {family}" if len(families) > 1 else "")
            parts = [
                f"lowest {describe_exam(members[0], sitting)}"
                if study
                else "; ".join(describe_exam(g, sitting) for g in members)
            ]
            if len(members) > 1:
                others = members[1:2] if study else members[1:]
                parts.append(
                    ("against the runner-up: " if study else "")
                    + joined([compare_exam(members[0], g, sitting, outcomes) for g in others])
                )
            worse = [g.label for g in members if worse_than_unigram(g, sitting)]
            if worse:
                parts.append(
                    f"{'; '.join(worse)}: worse than a unigram count model on the same targets"
                    + (" at every seed" if any(len(g.rows) > 1 for g in members) else "")
                    + ": nothing beyond word frequencies learned yet"
                )
            lines += textwrap.wrap(
                f"{head} ({sitting.unit}, lower is better): " + ". ".join(parts),
                width,
                initial_indent="  ",
                subsequent_indent="    ",
                break_on_hyphens=False,
            )
    return lines


def below_counts(group: Group, key: str) -> str | None:
    """`unigram` or `bigram` (the weaker of the two the group is below): every run's accuracy on `key` below the
    count model's by more than 1.96 standard errors; None otherwise."""
    for order in ("unigram", "bigram"):
        below = []
        for row in group.rows:
            e = row.get("eval") or {}
            acc, se, ref = e.get(f"{key}/accuracy"), e.get(f"{key}/accuracy_se"), e.get(f"{key}/{order}_accuracy")
            below.append(None not in (acc, se, ref) and acc + 1.96 * se < ref)
        if all(below):
            return order
    return None


def chance_level(groups: list[Group], key: str) -> float | None:
    """An lm-eval multiple-choice metric's chance level (eval/lm_eval/<task>/chance_<metric>), where its runs
    record one."""
    head, _, metric = key.rpartition("/")
    found = {r["eval"].get(f"{head}/chance_{metric}") for g in groups for r in g.rows} - {None}
    return found.pop() if len(found) == 1 else None


def below_simple(group: Group, key: str, baseline: str = "tfidf") -> str | None:
    """`clm by 0.363 [0.330, 0.398]`: how far a score lies below a simple baseline's (selfsup.evaluation.simple:
    tfidf, copy, frequent), where the interval of the difference lies below 0 at every seed; else None."""
    found = [
        [(row.get("eval") or {}).get(f"{key}/vs_{baseline}{end}") for end in ("", "_low", "_high")]
        for row in group.rows
    ]
    if not found or any(None in f or f[2] >= 0 for f in found):
        return None
    if len(found) == 1:
        value, low, high = found[0]
        return f"{group.label} by {Interval(-value, -high, -low, signed=False)}"
    gaps = [-f[0] for f in found]
    return f"{group.label} by a mean {statistics.fmean(gaps):.3f} ({min(gaps):.3f} to {max(gaps):.3f} over {len(gaps)} seeds)"


def joined(found: list[tuple[str, str | None]]) -> str:
    """The comparisons, those that share a note followed by it once."""
    parts, pending = [], []
    for text, note in found + [("", None)]:
        if pending and note != pending[-1][1]:
            parts.append("; ".join(t for t, _ in pending) + f": {pending[-1][1]}")
            pending = []
        if note is None:
            parts.append(text) if text else None
        else:
            pending.append((text, note))
    return "; ".join(parts)


# ------------------------------------------------------------------------------------------ the verdict
def describe(group: Group, key: str) -> str:
    found = group.margins(key)
    if len(found) == 1:
        return f"{group.label} {found[0]}"
    values = [m.value for m in found]
    above = sum(m.low > 0 for m in found)
    return (
        f"{group.label} mean {statistics.fmean(values):+.3f} ({min(values):+.3f} to {max(values):+.3f} over "
        f"{len(found)} seeds, interval above 0 at {above} of {len(found)} seeds)"
    )


def verdict_lines(rows: list[dict], width: int = 100) -> list[str]:
    """The verdict of runs (summary.json dicts): what was held equal; per score, which groups show pretraining
    and which do not yet; between groups, the leader's margin against each other's (see the module's doc)."""
    outcomes = {id(row): load_outcomes(row) for row in rows if row.get("status") == "finished" and row.get("eval")}
    rows = [  # a run whose summary says other scores than its outcomes: left out, with what disagrees
        {**row, "left_out": outcomes[id(row)]} if isinstance(outcomes.get(id(row)), Contradiction) else row
        for row in rows
    ]
    groups = groups_of([row for row in rows if not row.get("left_out")])
    members = [row for g in groups for row in g.rows]
    keys = list(dict.fromkeys(k for row in members for k in score_keys(row)))
    keys.sort(key=lambda k: not k.startswith("eval/pairs"))  # the pairs' scorers, then the probe tasks
    out = [row for row in rows if not any(row is m for m in members)]
    said = [row for row in out if row.get("left_out")]  # the sweep's footer lists the runs that did not finish
    if not keys and not any(exam_of(row, sitting) is not None for row in members for sitting in SITTINGS):
        return [VERDICT_HEAD + "):", *_wrapped(left_out(said), width)] if said else []  # nothing else to read
    equal = held_equal(members)
    lines = textwrap.wrap(
        VERDICT_HEAD + (f"; {equal}):" if equal else "):"),
        width,
        subsequent_indent="    ",
        break_on_hyphens=False,
    )
    study = is_study(members)
    # a score's runs split by the settings that made it: never pooled, a line each (selfsup.results.settings)
    for key, suffix, judged in [(k, suffix, part) for k in keys for suffix, part in by_settings(groups, k)]:
        having = [g for g in judged if len(g.margins(key)) == len(g.rows)]
        few = [g for g in having if (g.examples(key) or MIN_EXAMPLES) < MIN_EXAMPLES]  # not called either way
        having = [g for g in having if g not in few]
        if study:  # the best first
            having.sort(key=lambda g: -statistics.fmean(m.value for m in g.margins(key)))
        shown = [g for g in having if all(m.low > 0 for m in g.margins(key))]
        worse = [g for g in having if all(m.high < 0 for m in g.margins(key))]  # untrained models score higher
        held = [g for g in having if g not in shown and g not in worse]
        parts = [
            f"too few test examples ({g.examples(key)}, fewer than {MIN_EXAMPLES}) to call: {describe(g, key)}"
            for g in few
        ]
        if study and having:  # the best trial against random-init and the runner-up (the table has every trial)
            parts.append(f"{len(shown)} of {len(having)} trials show pretraining")
            parts.append(
                f"best {describe(having[0], key)} ("
                + (
                    "shows pretraining"
                    if having[0] in shown
                    else "random-init does better"
                    if having[0] in worse
                    else "no pretraining shown yet"
                )
                + ")"
            )
        else:
            if shown:
                parts.append("shows pretraining: " + "; ".join(describe(g, key) for g in shown))
            if held:
                parts.append("no pretraining shown yet: " + "; ".join(describe(g, key) for g in held))
            if worse:
                parts.append("random-init does better: " + "; ".join(describe(g, key) for g in worse))
        if len(having) > 1:
            best = max(having, key=lambda g: statistics.fmean(m.value for m in g.margins(key)))
            others = having[1:2] if study else [g for g in having if g is not best]
            parts.append(
                ("against the runner-up: " if study else "") + joined([compare(best, g, key, outcomes) for g in others])
            )
            parts.append(scorers_differ(having, key) or "")
            parts.append(scoring_flips(having, key, outcomes) or "")
        level = chance_level(having, key)
        if level is not None:
            parts.append(f"chance level {level:.3f} (a random pick among each document's choices)")
        for baseline, title in SIMPLE.items():
            below = [g for g in having if below_simple(g, key, baseline)]
            if below:
                parts.append(f"below {title}: " + "; ".join(below_simple(g, key, baseline) for g in below))
        for order in ("unigram", "bigram"):
            below = [g.label for g in having if below_counts(g, key) == order]
            if below:
                parts.append(
                    f"{'; '.join(below)}: below a {order} count model's accuracy"
                    + (" at every seed" if any(len(g.rows) > 1 for g in having) else "")
                    + (": nothing beyond word frequencies" if order == "unigram" else ": nothing beyond word pairs")
                    + " learned yet"
                )
        text = f"{score_label(key)}{suffix}: " + ". ".join(p for p in parts if p)
        lines += textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)
    lines += exam_lines(groups, outcomes, width, study)
    if out:
        lines += _wrapped(left_out(out), width)
    return lines


def _wrapped(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False)


def is_study(rows: list[dict]) -> bool:
    """The runs are trials of an Optuna study (their sweep dir holds optuna.db): the verdict compares the best
    with random-init and the runner-up only."""
    return any(row.get("run_dir") and (Path(row["run_dir"]).parent / "optuna.db").is_file() for row in rows)


def left_out(rows: list[dict]) -> str:
    """`left out: clm (sweep/1): preempted by SIGTERM at step 76; ...`: the runs the verdict did not read, and why."""
    reasons = []
    for row in rows:
        status = row.get("status") or "failed"
        why = row.get("left_out") or {
            "finished": "no evaluation scores",
            "preempted": f"preempted by {row.get('preempted_by') or 'a signal'} at step {row.get('steps')}",
            "pruned": "pruned by the sweeper",
        }.get(status, f"{status}" + (f" ({row['error']})" if row.get("error") else ""))
        place = Path(str(row.get("run_dir") or "?")).name
        reasons.append(f"{setting_label(row) if row.get('objective') else 'job'} ({place}): {why}")
    return "left out: " + "; ".join(reasons) if reasons else "no runs"


def verdict_text(rows: list[dict]) -> str:
    """The verdict as one string (W&B summary, summary.json, a sweep's verdict.json)."""
    return "\n".join(verdict_lines(rows, width=10_000))


def save_verdict(sweep_dir: Path, rows: list[dict]) -> None:
    """The sweep's verdict as <sweep_dir>/verdict.json: {"verdict": the text, "runs": the run dirs it read}."""
    text = verdict_text(rows)
    if not text:
        return
    tmp = sweep_dir / f".{VERDICT}.tmp"
    tmp.write_text(json.dumps({"verdict": text, "runs": [row.get("run_dir") for row in rows]}, indent=2))
    os.replace(tmp, sweep_dir / VERDICT)
