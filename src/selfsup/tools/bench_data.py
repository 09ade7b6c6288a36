"""`selfsup-bench data`: preparing generated corpora, cold and warm, beside a plain `tokenizers` baseline.

Each corpus is .jsonl files of built-in prose (paragraphs of the pydoc topics and standard-library docstrings,
five per document, drawn at random), 1 MB per file. Every measurement runs in a fresh process, which
reports its own peak RSS (and the largest of its worker processes'):

    cold      Corpus.prepare() with no cache: stream, split, BPE on the sample, tokenize, write the shards
    warm      a new process finding that cache: its prepare() seconds, and the process's seconds from start
              (imports included) to a ready corpus
    baseline  read the same files (json per line) and tokenizers' encode_batch_fast with the trained
              tokenizer, in this one process: no split, no tokenizer training, nothing written
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from selfsup.common.memory import peak_rss_mb
from selfsup.data import Corpus
from selfsup.data.builtin import builtin_documents

CHILD = "selfsup.tools.bench_data"


def generate(folder: Path, megabytes: int) -> Path:
    """megabytes of .jsonl documents (1 MB per file), made once per folder."""
    done = folder / f".{megabytes}MB"
    if done.is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    paragraphs = [p for d in builtin_documents() for p in d.split("\n\n") if len(p) > 40]
    rng = random.Random(megabytes)
    for f in range(megabytes):
        with open(folder / f"part{f:05d}.jsonl", "w") as out:
            size = 0
            while size < 1_000_000:
                text = "\n\n".join(rng.sample(paragraphs, 5))
                out.write(json.dumps({"text": text}) + "\n")
                size += len(text)
    done.touch()
    return folder


def child(mode: str, corpus: str, cache: str, started: float) -> None:
    """One measurement in this (fresh) process; prints one JSON line."""
    c = Corpus(source="text_files", paths=[corpus], cache_dir=cache, vocab_size=4096, quiet=True)
    if mode == "baseline":
        c.prepare()  # the cache of the cold run: its tokenizer
        tokenizer, chars, tokens = c.tokenizer, 0, 0
        begin = time.perf_counter()
        for path in sorted(Path(corpus).glob("*.jsonl")):
            texts = [json.loads(line)["text"] for line in open(path, encoding="utf-8")]
            chars += sum(map(len, texts))
            tokens += sum(len(e.ids) for e in tokenizer.encode_batch_fast(texts, add_special_tokens=False))
        seconds = time.perf_counter() - begin
    else:
        begin = time.perf_counter()
        c.prepare()
        seconds = time.perf_counter() - begin
        chars = sum(c.meta["characters"].values())
        tokens = sum(c.meta["tokens"].values())
    rss, workers = peak_rss_mb(), peak_rss_mb(children=True)
    print(
        json.dumps(
            {
                "seconds": seconds,
                "process_seconds": time.time() - started,
                "chars": chars,
                "tokens": tokens,
                "rss_mb": rss,
                "workers_rss_mb": workers,
            }
        )
    )


def measure(mode: str, corpus: Path, cache: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", CHILD, mode, str(corpus), str(cache), repr(time.time())],
        capture_output=True,
        text=True,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "true"},
    )
    if out.returncode != 0:
        raise SystemExit(f"selfsup-bench data: the {mode} run failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_data(sizes: list[int], folder: str | None = None) -> list[dict]:
    root = Path(folder or tempfile.mkdtemp(prefix="selfsup-bench-data-"))
    rows = []
    for megabytes in sizes:
        corpus = generate(root / f"corpus-{megabytes}MB", megabytes)
        cache = Path(tempfile.mkdtemp(prefix="cache-", dir=root))
        cold = measure("cold", corpus, cache)
        warm = measure("warm", corpus, cache)
        base = measure("baseline", corpus, cache)
        mb = cold["chars"] / 1e6
        rows.append(
            {
                "corpus": f"{megabytes} MB",
                "documents MB": f"{mb:,.0f}",
                "tokens": f"{cold['tokens']:,}",
                "cold s": f"{cold['seconds']:.1f}",
                "cold MB/s": f"{mb / cold['seconds']:.1f}",
                "cold peak RSS MB": f"{cold['rss_mb']:,.0f} (workers {cold['workers_rss_mb']:,.0f})",
                "warm prepare s": f"{warm['seconds']:.3f}",
                "warm process s": f"{warm['process_seconds']:.1f}",
                "warm peak RSS MB": f"{warm['rss_mb']:,.0f}",
                "baseline MB/s": f"{base['chars'] / 1e6 / base['seconds']:.1f}",
            }
        )
    return rows


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
