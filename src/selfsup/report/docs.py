"""The measured blocks of README.md, docs/results.md and docs/evaluation.md, regenerated from one run of the main job.

    python -m selfsup.report.docs                  runs `selfsup-train experiment=compare` (into
                                                   outputs/docs/<date>_<time>), then rewrites the blocks
    python -m selfsup.report.docs --sweep DIR      rewrites them from a finished sweep of the main job
    python -m selfsup.report.docs --seeds          also runs seeds 1 and 2 of the main job (about 9 more
                                                   minutes) and rewrites the `seeds` block: the verdict over
                                                   seeds 0, 1, 2 (--seeds-sweep DIR: from a finished one)
    python -m selfsup.report.docs --downstream     also runs `selfsup-eval` on the sweeps (the downstream jobs,
                                                   conf/eval/jobs.yaml) and rewrites the `downstream` block:
                                                   the fine-tuned scores at each seed and the verdict over them
                                                   (without it, the block is written from the sweeps' evaluated.json
                                                   files where they have them)
    python -m selfsup.report.docs --between DIR    adds a finished sweep of the objectives between the main job's
                                                   (`selfsup-train experiment=compare objective=prefix_lm,ul2
                                                   seed=0,1,2`) to the `downstream` block (with --downstream,
                                                   selfsup-eval runs on it too)
    python -m selfsup.report.docs --print          prints the blocks, writes nothing
    ... --only seeds                               rewrites the blocks named alone

A block lies between `<!-- selfsup.report.docs:NAME -->` and `<!-- /selfsup.report.docs:NAME -->`; the
text between is replaced, the rest of the file kept (the `seeds` block only when seeds were run or given, the
`downstream` block only when the sweeps' runs were evaluated). The tables are printed by the same functions as the
end of a sweep (selfsup.results.summary, selfsup.results.verdict).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timedelta
from pathlib import Path

from selfsup.errors import UserError
from selfsup.evaluation.fixed import KINDS
from selfsup.evaluation.generation import NOT_A_WRITER, WRITERS
from selfsup.results.groups import Group, groups_of, run_margin
from selfsup.results.summary import DEFINITIONS, evaluated_rows, job_names, read_summaries, summary_table, task_names
from selfsup.results.verdict import verdict_lines

FILES = ("README.md", "docs/results.md", "docs/evaluation.md")  # each file gets the blocks it holds
MARK = "selfsup.report.docs"


class DocsError(UserError):
    """One line: what is wrong and how to fix it."""


def console(rows: list[dict]) -> str:
    """The end of the sweep as it prints (its table, the definitions, the verdict), in a text block."""
    text = "\n".join([summary_table(rows), textwrap.fill(DEFINITIONS, 100), *verdict_lines(rows)])
    return f"```\n{text}\n```"


def _random_init(row: dict, key: str) -> str:
    evaluated = row.get("eval") or {}
    mean, sd = evaluated.get(f"{key}/random_init_accuracy"), evaluated.get(f"{key}/random_init_accuracy_sd")
    return "-" if mean is None else f"{mean:.3f} ± {sd:.3f}"


def _number(value, form: str) -> str:
    return "-" if value is None else format(value, form)


def scores(rows: list[dict]) -> str:
    """Each run's scores beside its random-init baselines, with the margins and their intervals."""
    lines = [
        "| objective | steps | FLOPs | val loss | fixed loss | pairs acc | pairs random-init | pairs margin "
        "| probe acc | probe random-init | probe margin |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for row in rows:
        evaluated = row.get("eval") or {}
        lines.append(
            " | ".join(
                [
                    f"| {row.get('objective')}",
                    str(row.get("steps")),
                    _number(row.get("flops_seen"), ".2g"),
                    _number(row.get("val_loss"), ".3f"),
                    _number(evaluated.get("eval/fixed/loss"), ".3f"),
                    _number(evaluated.get("eval/pairs/accuracy"), ".3f"),
                    _random_init(row, "eval/pairs"),
                    str(run_margin(row, "eval/pairs") or "-"),
                    _number(evaluated.get("eval/probe/accuracy"), ".3f"),
                    _random_init(row, "eval/probe"),
                    str(run_margin(row, "eval/probe") or "-"),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def fixed_split(rows: list[dict]) -> str:
    """The fixed exam's loss by kind of target beside the unigram on the same targets."""
    lines = ["| objective | target | share | loss (nats) | unigram on the same targets |", "|---|---|---:|---:|---:|"]
    for row in rows:
        evaluated = row.get("eval") or {}
        for kinds in KINDS.values():
            for kind in kinds:
                if f"eval/fixed/{kind}/loss" in evaluated:
                    share = evaluated.get(f"eval/fixed/{kind}/fraction")
                    lines.append(
                        f"| {row.get('objective')} | {kind} | "
                        f"{'not in the loss' if share is None else f'{share:.1%}'} | "
                        f"{evaluated[f'eval/fixed/{kind}/loss']:.2f} | "
                        f"{_number(evaluated.get(f'eval/fixed/{kind}/unigram_loss'), '.2f')} |"
                    )
        if "eval/fixed/unigram_loss" in evaluated:
            lines.append(
                f"| {row.get('objective')} | next | 100% | {evaluated['eval/fixed/loss']:.2f} | "
                f"{evaluated['eval/fixed/unigram_loss']:.2f} |"
            )
    return "\n".join(lines)


def cost(rows: list[dict], elapsed: float | None) -> str:
    """The evaluation's seconds by part beside each run's wall time, and the whole job's."""
    names = [str(r.get("objective")) for r in rows]
    lines = ["| seconds | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for part, title in PARTS:
        if not any((r.get("eval_part_seconds") or {}).get(part) for r in rows):
            continue
        lines.append(
            f"| {title} | "
            + " | ".join(_number((r.get("eval_part_seconds") or {}).get(part), ".1f") for r in rows)
            + " |"
        )
    lines.append("| evaluation | " + " | ".join(_number(r.get("eval_seconds"), ".1f") for r in rows) + " |")
    lines.append("| the run's wall time | " + " | ".join(_number(r.get("wall_seconds"), ".0f") for r in rows) + " |")
    total = sum(r.get("wall_seconds") or 0 for r in rows)
    whole = (
        f"the whole command {timedelta(seconds=round(elapsed))} ({elapsed:.0f} s)"
        if elapsed is not None
        else "the command's own time was not measured (--sweep)"
    )
    return "\n".join(lines) + f"\n\nThe runs' wall time: {total:.0f} s; {whole}."


PARTS = (
    ("plan", "the plan's warm-up"),
    ("fixed", "fixed exam"),
    ("pairs", "minimal pairs"),
    ("heldout", "held-out text"),
    ("infilling", "infilling job"),
    ("probe", "probe"),
    ("generation", "generation jobs"),
)  # an evaluation's parts (Evaluation.part_seconds) as the timing and cost blocks name them


def timing(rows: list[dict], elapsed: float | None, cached: bool | None = None) -> str:
    """One sentence: when and where the job was measured, how long it took, and the evaluation's part of it,
    by part."""
    total = sum(r.get("wall_seconds") or 0 for r in rows)
    evaluation = sum(r.get("eval_seconds") or 0 for r in rows)
    parts = {title: sum((r.get("eval_part_seconds") or {}).get(part) or 0 for r in rows) for part, title in PARTS}
    split = ", ".join(f"{title} {seconds:.0f} s" for title, seconds in parts.items() if seconds)
    share = f" ({evaluation / elapsed:.0%} of the command)" if elapsed else ""
    whole = f" (the whole command {elapsed:.0f} s)" if elapsed is not None else ""
    state = {
        True: ", the random-init baselines read from the cache of an earlier run",
        False: ", the random-init baselines computed in the run, as from a clean working directory",
        None: "",
    }[cached]
    return (
        f"Measured on {os.cpu_count()} CPU cores ({datetime.now():%Y-%m-%d}{state}): the {len(rows)} runs "
        f"take {total:.0f} s of wall time{whole}, of which the evaluation {evaluation:.0f} s{share}"
        + (f": {split}." if split else ".")
    )


def seeds(rows: list[dict]) -> str:
    """The margins of every run of the main job at each seed, and the verdict over the seeds."""
    lines = [
        "| objective | seed | val loss | pairs margin | probe margin | wall time |",
        "|---|---:|---:|---|---|---:|",
    ]
    for row in sorted(rows, key=lambda r: (str(r.get("objective")), (r.get("swept") or {}).get("seed", 0))):
        lines.append(
            f"| {row.get('objective')} | {(row.get('swept') or {}).get('seed', 0)} | "
            f"{_number(row.get('val_loss'), '.3f')} | {run_margin(row, 'eval/pairs') or '-'} | "
            f"{run_margin(row, 'eval/probe') or '-'} | {_number(row.get('wall_seconds'), '.0f')} s |"
        )
    return "\n".join(lines) + "\n\n```\n" + "\n".join(verdict_lines(rows)) + "\n```"


def _seed(row: dict) -> int:
    return (row.get("swept") or {}).get("seed", 0)


def _cell(group: Group, key: str) -> str:
    """`+0.151 (3/3)`: the mean margin over the group's seeds and at how many its interval lies above 0."""
    found = group.margins(key)
    if len(found) < len(group.rows) or not found:
        return "-"
    above = sum(m.low > 0 for m in found)
    return f"{sum(m.value for m in found) / len(found):+.3f} ({above}/{len(found)})"


def answer(rows: list[dict]) -> str:
    """The objective x job table: per objective, each task's and generation job's mean margin over random-init
    across its seeds and at how many seeds its interval lies above 0 (an encoder writes no text)."""
    tasks = task_names(k for r in rows for k in r["eval"])
    jobs = job_names(k for r in rows for k in r["eval"])
    columns = [(f"eval/{t}", f"{t} accuracy") for t in tasks]
    columns += [(f"eval/{j}/{s}", f"{j} {title}") for j in jobs for s, title in (("loss", "loss"), ("token_f1", "F1"))]
    columns += [(f"eval/{j}/exact_match", f"{j} exact match") for j in jobs]
    lines = [
        "| objective | " + " | ".join(title for _, title in columns) + " |",
        "|---|" + "---:|" * len(columns),
    ]
    for group in sorted(groups_of(rows), key=lambda g: g.label):
        writes = all(r.get("architecture") in WRITERS for r in group.rows)
        cells = [_cell(group, key) if writes or key.count("/") == 1 else NOT_A_WRITER for key, _ in columns]
        lines.append(f"| {group.label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def job_table(rows: list[dict]) -> list[str]:
    """Each generation job's scores per objective and seed: loss, exact match and token F1 with random-init's and
    the margins (the loss's: random-init's minus the run's)."""
    lines = [
        "| job | objective | seed | loss | random-init loss | loss margin | exact match | EM margin | token F1 "
        "| random-init F1 | F1 margin |",
        "|---|---|---:|---:|---:|---|---:|---|---:|---:|---|",
    ]
    ordered = sorted(rows, key=lambda r: (str(r.get("objective")), _seed(r)))
    for name in job_names(k for r in rows for k in r["eval"]):
        for row in ordered:
            e, key = row["eval"], f"eval/{name}"
            if f"{key}/loss" not in e:
                continue
            lines.append(
                f"| {name} | {row.get('objective')} | {_seed(row)} | {e[f'{key}/loss']:.3f} | "
                f"{_number(e.get(f'{key}/random_init_loss'), '.3f')} | {run_margin(row, f'{key}/loss') or '-'} | "
                f"{e[f'{key}/exact_match']:.3f} | {run_margin(row, f'{key}/exact_match') or '-'} | "
                f"{e[f'{key}/token_f1']:.3f} | {_number(e.get(f'{key}/random_init_token_f1'), '.3f')} | "
                f"{run_margin(row, f'{key}/token_f1') or '-'} |"
            )
    return lines


def downstream(rows: list[dict]) -> str:
    """The runs' evaluated scores (selfsup-eval's evaluated.json): the objective x job table (answer), each task's
    fine-tuned accuracy beside its baselines and its margin at each seed, each generation job's scores; each run's
    selfsup-eval seconds; the verdict over the seeds."""
    lines = [answer(rows), ""] if job_names(k for r in rows for k in r["eval"]) else []
    lines += [
        "| task | objective | seed | accuracy (± sd over fine-tuning seeds) | random-init | majority | margin |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    ordered = sorted(rows, key=lambda r: (str(r.get("objective")), _seed(r)))
    for name in task_names(k for r in rows for k in r["eval"]):
        for row in ordered:
            key, evaluated = f"eval/{name}", row["eval"]
            if f"{key}/accuracy" not in evaluated:
                continue
            sd = evaluated.get(f"{key}/accuracy_sd")
            lines.append(
                f"| {name} | {row.get('objective')} | {_seed(row)} | {evaluated[f'{key}/accuracy']:.3f}"
                f"{'' if sd is None else f' ± {sd:.3f}'} | {_random_init(row, key)} | "
                f"{_number(evaluated.get(f'{key}/majority_accuracy'), '.3f')} | {run_margin(row, key) or '-'} |"
            )
    if job_names(k for r in rows for k in r["eval"]):
        lines += ["", *job_table(rows)]
    lines += [
        "",
        "| selfsup-eval seconds | " + " | ".join(f"{r.get('objective')} seed {_seed(r)}" for r in ordered) + " |",
    ]
    lines.append("|---|" + "---:|" * len(ordered))
    seconds = [sum(e.get("seconds") or 0 for e in r.get("evaluations") or []) for r in ordered]
    lines.append("| the run's evaluations | " + " | ".join(f"{s:.0f}" for s in seconds) + " |")
    parts = list(
        dict.fromkeys(p for r in ordered for e in r.get("evaluations") or [] for p in e.get("part_seconds") or {})
    )
    for part in parts:  # each part's, from the last evaluation that spent time on it
        found = [
            next(
                (
                    e["part_seconds"][part]
                    for e in reversed(r.get("evaluations") or [])
                    if (e.get("part_seconds") or {}).get(part)
                ),
                None,
            )
            for r in ordered
        ]
        lines.append(f"| {part} | " + " | ".join(_number(v, ".0f") for v in found) + " |")
    return "\n".join(lines) + "\n\n```\n" + "\n".join(verdict_lines(rows)) + "\n```"


def blocks(
    rows: list[dict],
    elapsed: float | None = None,
    cached: bool | None = None,
    seed_rows: list[dict] | None = None,
    between_rows: list[dict] | None = None,
) -> dict[str, str]:
    found = {
        "console": console(rows),
        "timing": timing(rows, elapsed, cached),
        "scores": scores(rows),
        "fixed-split": fixed_split(rows),
        "cost": cost(rows, elapsed),
    }
    if seed_rows:
        found["seeds"] = seeds(rows + seed_rows)
    evaluated = evaluated_rows(rows + (seed_rows or []) + (between_rows or []))
    if evaluated:
        found["downstream"] = downstream(evaluated)
    return found


BLOCKS = ("console", "timing", "scores", "fixed-split", "cost", "seeds", "downstream")


def rewrite(text: str, found: dict[str, str], where: str) -> str:
    """text with every block it holds replaced by `found`'s (a block `found` lacks is kept); a block opened and
    not closed, or of an unknown name, is refused."""

    def replace(match: re.Match) -> str:
        name = match.group(1)
        if name not in BLOCKS:
            raise DocsError(f"{where}: unknown block {name!r}: use one of {', '.join(BLOCKS)}")
        if name not in found:
            return match.group(0)
        return f"<!-- {MARK}:{name} -->\n{found[name]}\n<!-- /{MARK}:{name} -->"

    opened = re.findall(rf"<!-- {re.escape(MARK)}:([\w-]+) -->", text)
    pattern = re.compile(rf"<!-- {re.escape(MARK)}:([\w-]+) -->\n.*?<!-- /{re.escape(MARK)}:\1 -->", re.S)
    if len(pattern.findall(text)) != len(opened):
        raise DocsError(f"{where}: a block opened with <!-- {MARK}:NAME --> has no <!-- /{MARK}:NAME --> after it")
    return pattern.sub(replace, text)


def run_main_job(root: Path, *overrides: str) -> tuple[Path, float, bool]:
    """Runs the main job into root/<date>_<time>: (its sweep dir, its seconds, whether its random-init
    baselines were read from the default data.cache_dir rather than computed by it)."""
    sweep_dir = root / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    began, started = time.time(), time.perf_counter()
    done = subprocess.run(
        ["selfsup-train", "experiment=compare", *overrides, f"hydra.sweep.dir={sweep_dir}"], check=False
    )
    if done.returncode != 0:
        raise DocsError(f"the main job failed (exit {done.returncode}): nothing was written; see {sweep_dir}")
    written = [p for p in Path(".cache/selfsup").glob("*-random-init/*") if p.stat().st_mtime >= began]
    return sweep_dir, time.perf_counter() - started, not written


def run_selfsup_eval(sweep_dir: Path) -> None:
    """selfsup-eval on a sweep dir (its downstream jobs: conf/eval/jobs.yaml), its output shown as it runs."""
    done = subprocess.run(["selfsup-eval", str(sweep_dir)], check=False)
    if done.returncode != 0:
        raise DocsError(f"selfsup-eval {sweep_dir} failed (exit {done.returncode}): the docs were not rewritten")


def finished(sweep_dir: Path, option: str) -> list[dict]:
    """The rows of a finished sweep dir: every job's summary.json with status finished."""
    if not sweep_dir.is_dir():
        raise DocsError(f"{option} {sweep_dir} is not a folder: pass the sweep dir the main job printed")
    rows = read_summaries(sweep_dir)
    if not rows or any(r.get("status") != "finished" for r in rows):
        raise DocsError(f"{sweep_dir} holds no finished sweep (every job's summary.json with status finished)")
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m selfsup.report.docs", description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, help="a finished sweep dir of `selfsup-train experiment=compare`")
    parser.add_argument(
        "--elapsed", type=float, help="with --sweep: the seconds its whole command took (e.g. from /usr/bin/time)"
    )
    parser.add_argument("--seeds", action="store_true", help="also run seeds 1 and 2 (the `seeds` block)")
    parser.add_argument("--seeds-sweep", type=Path, help="a finished sweep of `experiment=compare seed=1,2`")
    parser.add_argument(
        "--downstream", action="store_true", help="also run selfsup-eval on the sweeps (the `downstream` block)"
    )
    parser.add_argument(
        "--between", type=Path, help="a finished sweep of other objectives (prefix_lm, ul2) for the `downstream` block"
    )
    parser.add_argument(
        "--clean",
        action="store_true",
        help="with --sweep: its command ran from a clean working directory (its random-init baselines computed in it)",
    )
    parser.add_argument("--only", nargs="+", choices=BLOCKS, help="rewrite these blocks alone")
    parser.add_argument("--print", action="store_true", help="print the blocks, write nothing")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root (default: .)")
    args = parser.parse_args(argv)
    try:
        paths = [args.root / name for name in FILES]
        for path in paths:
            if not path.is_file():
                raise DocsError(f"{path} does not exist: run from the repository root or pass --root")
        elapsed, cached = args.elapsed, (False if args.clean else None)
        if args.sweep is None:
            args.sweep, elapsed, cached = run_main_job(args.root / "outputs" / "docs")
        if args.seeds and args.seeds_sweep is None:
            args.seeds_sweep = run_main_job(args.root / "outputs" / "docs", "seed=1,2")[0]
        rows = finished(args.sweep, "--sweep")
        if args.downstream:
            for sweep in filter(None, (args.sweep, args.seeds_sweep, args.between)):
                run_selfsup_eval(sweep)
        found = blocks(
            rows,
            elapsed,
            cached,
            finished(args.seeds_sweep, "--seeds-sweep") if args.seeds_sweep else None,
            finished(args.between, "--between") if args.between else None,
        )
        if args.only:
            found = {name: text for name, text in found.items() if name in args.only}
        if args.print:
            print("\n\n".join(f"{name}:\n{text}" for name, text in found.items()))
            return
        new = {path: rewrite(path.read_text(), found, str(path)) for path in paths}  # all checked before any write
        for path, text in new.items():
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
            print(f"rewrote {path}")
    except DocsError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
