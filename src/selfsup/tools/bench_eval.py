"""`selfsup-bench eval`: what the evaluation costs a run, on generated corpora of growing size.

For each corpus size (the .jsonl prose of `selfsup-bench data`) and each family's default objective,
`selfsup-train` runs one training step with the default evaluation (or the `eval` option and overrides given:
`--eval jobs`, the downstream jobs), twice in fresh processes: the first builds the token cache and the random-init
baselines, the second finds both (a warm start) and is the one reported: its `eval_seconds` and their parts (fixed
exam, minimal pairs, held-out text, probe: the classification tasks, generation: the generation jobs) from
summary.json, and its wall time beside a run of the same settings with `eval=none`. The evaluation reads at most
`eval.fixed.max_tokens` of the validation split, so its time must not grow with the corpus.

`--sweep DIR` (bench_sweep): `selfsup-eval` on a finished sweep (the main job's), each run's seconds by part beside
the plan's estimate, with whatever the runs' cache holds.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER, RunSummary
from selfsup.data.builtin import builtin_documents

FAMILIES = {"mlm": ENCODER, "clm": DECODER, "span_corruption": ENCODER_DECODER}


def train(run_dir: Path, corpus: Path, cache: Path, objective: str, *extra: str) -> dict:
    command = [
        sys.executable,
        "-m",
        "selfsup.run.cli",
        f"objective={objective}",
        "data=text_files",
        f"data.paths=[{corpus}]",
        f"data.cache_dir={cache}",
        "trainer.max_steps=1",
        "trainer.val_check_interval=1",
        "logger=none",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]
    out = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "disabled"})
    if out.returncode != 0:
        raise SystemExit(f"selfsup-bench eval: {' '.join(command[3:])} failed: {out.stderr.strip()[-2000:]}")
    return RunSummary.read(run_dir).values


PARTS = ("plan", "fixed", "pairs", "heldout", "infilling", "probe", "generation")


def bench_eval(
    sizes: list[int], objectives: list[str], folder: str | None = None, evaluation: tuple[str, ...] = ()
) -> list[dict]:
    """The table's rows; `evaluation`: eval=OPTION and eval.* overrides for the measured runs."""
    from selfsup.tools.bench_data import generate

    root = Path(folder or tempfile.mkdtemp(prefix="selfsup-bench-eval-"))
    rows = []
    for megabytes in sizes:
        corpus = generate(root / f"corpus-{megabytes}MB", megabytes)
        cache = Path(tempfile.mkdtemp(prefix="cache-", dir=root))
        for objective in objectives:
            runs = Path(tempfile.mkdtemp(prefix=f"runs-{objective}-", dir=root))
            train(runs / "cold", corpus, cache, objective, *evaluation)
            warm = train(runs / "warm", corpus, cache, objective, *evaluation)
            bare = train(runs / "none", corpus, cache, objective, "eval=none")
            parts = warm.get("eval_part_seconds") or {}
            meta = json.loads(next(cache.glob("*/meta.json")).read_text())
            rows.append(
                {
                    "corpus": f"{megabytes} MB",
                    "objective": objective,
                    "model": FAMILIES.get(objective, "?"),
                    "val tokens": f"{sum(v for k, v in meta['tokens'].items() if k.startswith('val')):,}",
                    "eval s": f"{warm['eval_seconds']:.1f}",
                    "plan's estimate s": f"{warm.get('eval_estimated_seconds') or 0:.1f}",
                    **{f"{part} s": f"{parts.get(part, 0.0):.1f}" for part in PARTS},
                    "run wall s": f"{warm['wall_seconds']:.1f}",
                    "eval=none wall s": f"{bare['wall_seconds']:.1f}",
                }
            )
    return rows


def bench_sweep(sweep: str, evaluation: tuple[str, ...] = ()) -> tuple[list[dict], str]:
    """`selfsup-eval SWEEP [evaluation]` in a fresh process: per run its evaluation's seconds by part (each task's
    and generation job's, and their random-init baselines'), the whole, the plan's estimate of it and the run's
    training seconds; and the plan's last line (the whole command's estimate, what the cache held)."""
    from selfsup.common.names import EVALUATED

    command = [sys.executable, "-m", "selfsup.tools.evaluate", sweep, *evaluation]
    out = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "disabled"})
    if out.returncode != 0:
        raise SystemExit(f"selfsup-bench eval: {' '.join(command[2:])} failed: {out.stderr.strip()[-2000:]}")
    plan = next((line for line in out.stdout.splitlines() if line.startswith("plan: ")), "")
    rows = []
    for run in sorted(Path(sweep).glob("*/" + EVALUATED), key=lambda p: p.parent.name):
        record = json.loads(run.read_text())["evaluations"][-1]
        summary = RunSummary.read(run.parent).values
        seconds, estimate = record.get("seconds") or 0.0, record.get("estimated_seconds") or 0.0
        rows.append(
            {
                "run": run.parent.name,
                "objective": summary.get("objective", "?"),
                **{f"{part} s": f"{value:.1f}" for part, value in (record.get("part_seconds") or {}).items()},
                "evaluation s": f"{seconds:.1f}",
                "plan's estimate s": f"{estimate:.1f}",
                "estimate / real": f"{estimate / seconds:.2f}" if seconds else "-",
                "training s": f"{(summary.get('wall_seconds') or 0) - (summary.get('eval_seconds') or 0):.0f}",
            }
        )
    parts = list(dict.fromkeys(k for r in rows for k in r if k.endswith(" s") and k not in ENDS))
    return [
        {**{k: r[k] for k in ("run", "objective")}, **{p: r.get(p, "-") for p in parts}, **{k: r[k] for k in ENDS}}
        for r in rows
    ], plan


ENDS = ("evaluation s", "plan's estimate s", "estimate / real", "training s")


def real_length_task(folder: Path, n_train: int = 3000, n_test: int = 1000, words: int = 75) -> list[str]:
    """A classification task of real-length texts written to `folder` (made once): chunks of `words` words (about
    128 tokens; each a third of the way past the one before) of the built-in corpus' documents, labelled by the kind of document each comes from (a pydoc
    topic or a standard-library docstring), balanced, n_train + n_test of them; and the selfsup-eval overrides that
    evaluate it alone (eval.tasks.real_length, the built-in tasks and generation jobs off). Its texts come from the
    pretraining corpus (no whole document is one): a measure of cost, not of what pretraining taught."""
    from pydoc_data.topics import topics

    train, test = folder / "real_length_train.jsonl", folder / "real_length_test.jsonl"
    if not (train.is_file() and test.is_file()):
        chunks: dict[str, list[str]] = {"topic": [], "docstring": []}
        topic_texts = set(topics.values())
        for document in builtin_documents():
            kind, cut = "topic" if document in topic_texts else "docstring", document.split()
            chunks[kind] += [" ".join(cut[i : i + words]) for i in range(0, len(cut) - words + 1, words // 3)]
        half = (n_train + n_test) // 2
        if min(map(len, chunks.values())) < half:
            raise SystemExit(f"selfsup-bench eval: the built-in corpus has fewer than {half} chunks of each kind")
        rng = random.Random(0)
        examples = [{"text": t, "label": k} for k, found in chunks.items() for t in rng.sample(found, half)]
        rng.shuffle(examples)
        folder.mkdir(parents=True, exist_ok=True)
        for path, part in ((train, examples[:n_train]), (test, examples[n_train : n_train + n_test])):
            path.write_text("".join(json.dumps(e) + "\n" for e in part))
    return [
        "~eval.tasks.next_sentence",
        "~eval.tasks.replaced_word",
        f"+eval.tasks.real_length={{source: text_files, paths: [{train}], test_paths: [{test}], "
        "text_field: text, label_field: label}",
        "eval.generation=null",
    ]
