"""`selfsup-bench eval`: what the evaluation costs a run, on generated corpora of growing size.

For each corpus size (the .jsonl prose of `selfsup-bench data`) and each family's default objective,
`selfsup-train` runs one training step with the default evaluation (or the `eval` option and overrides given:
`--eval jobs`, the downstream jobs), twice in fresh processes: the first builds the token cache and the random-init
baselines, the second finds both (a warm start) and is the one reported: its `eval_seconds` and their parts (fixed
exam, minimal pairs, held-out text, probe: the classification tasks, generation: the generation jobs) from
summary.json, and its wall time beside a run of the same settings with `eval=none`. The evaluation reads at most
`eval.fixed.max_tokens` of the validation split, so its time must not grow with the corpus.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER, RunSummary

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
        "trainer.progress_bar=false",
        "logger=none",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]
    out = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "disabled"})
    if out.returncode != 0:
        raise SystemExit(f"selfsup-bench eval: {' '.join(command[3:])} failed: {out.stderr.strip()[-2000:]}")
    return RunSummary.read(run_dir).values


PARTS = ("fixed", "pairs", "heldout", "probe", "generation")


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
                    **{f"{part} s": f"{parts.get(part, 0.0):.1f}" for part in PARTS},
                    "run wall s": f"{warm['wall_seconds']:.1f}",
                    "eval=none wall s": f"{bare['wall_seconds']:.1f}",
                }
            )
    return rows
