"""Benchmarks: commands that print tables (never timed tests).

selfsup-bench objectives   tokens/s of each objective on a 256x512 batch, beside transformers'
                           DataCollatorForLanguageModeling (needs the `bench` extra)
selfsup-bench train        training tokens/s of the full Lightning step per objective for the
                           default model, beside same-shape Hugging Face models trained in a
                           plain PyTorch loop on the same batches (needs the `bench` extra)
selfsup-bench parity       validation loss of each architecture after identical steps on the built-in corpus,
                           beside the transformers class its export writes (needs the `bench` extra)
selfsup-bench head         forward+backward of the output head and cross-entropy: the dense
                           logits + F.cross_entropy against selfsup.loss's fused chunks
selfsup-bench data         preparing generated corpora of 10 and 200 MB (--big: 1 GB too), cold and warm:
                           MB/s, warm-start seconds, peak RSS, beside tokenizers' encode_batch alone
selfsup-bench eval         the evaluation's seconds in a warm one-step run on corpora of 10 and 100 MB, by
                           part (fixed exam, minimal pairs, held-out text, probe, generation jobs), beside the
                           same run with eval=none; --eval jobs: the downstream jobs' (conf/eval/jobs.yaml);
                           --sweep DIR: selfsup-eval on a finished sweep, by part, beside the plan's estimate
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, models

from selfsup.data.vocab import Vocab, special_tokens
from selfsup.loss import linear_cross_entropy
from selfsup.objectives import build_objective
from selfsup.tools.bench_data import bench_data
from selfsup.tools.bench_eval import bench_eval, bench_sweep, real_length_task
from selfsup.tools.bench_train import PRESETS, bench_train
from selfsup.tools.parity import PARITY, parity


def timed(fn, repeats: int, warmup: int = 2) -> float:
    """Median seconds of one call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def print_table(rows: list[dict]) -> None:
    cols = list(rows[0])
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    print(" | ".join(c.ljust(width[c]) for c in cols))
    print("-|-".join("-" * width[c] for c in cols))
    for r in rows:
        print(" | ".join(str(r[c]).ljust(width[c]) for c in cols))


def hf_collator(vocab: Vocab):
    """transformers' MLM collator over a word-level tokenizer with our special-token layout."""
    # transformers is imported here, not at the top: it is the optional `bench` extra (its ImportError is caught)
    from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast

    names = special_tokens(vocab.n_sentinels)
    words = {t: i for i, t in enumerate(names)}
    words.update({f"w{i}": i for i in range(len(names), vocab.size)})
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(words, unk_token="<pad>")),
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        mask_token="<mask>",
        additional_special_tokens=names[4:],
    )
    return DataCollatorForLanguageModeling(tok, mlm=True, mlm_probability=0.15, return_tensors="pt")


def bench_objectives(batch: int, length: int, repeats: int) -> list[dict]:
    vocab = Vocab(size=32_000)
    rows = []
    for name, kwargs in [
        ("mlm", {}),
        ("mlm", {"whole_word": True}),
        ("clm", {}),
        ("span_corruption", {}),
        ("prefix_lm", {}),
        ("ul2", {}),
    ]:
        if kwargs.get("whole_word"):
            ws = torch.rand(vocab.size, generator=torch.Generator().manual_seed(0)) < 0.6
            vocab_used = Vocab(size=vocab.size, word_start=ws)
        else:
            vocab_used = vocab
        obj = build_objective(name, vocab_used, length, **kwargs)
        tokens = torch.randint(vocab.first_ordinary, vocab.size, (batch, obj.raw_length))
        g = torch.Generator().manual_seed(0)
        sec = timed(lambda: obj(tokens, g), repeats)
        label = name + (" (whole word)" if kwargs else "")
        rows.append(
            {
                "objective": label,
                "batch": f"{batch}x{obj.raw_length}",
                "ms/batch": f"{sec * 1e3:.2f}",
                "M raw tokens/s": f"{tokens.numel() / sec / 1e6:.1f}",
            }
        )
    try:
        collator = hf_collator(vocab)
    except ImportError:
        print("(transformers not installed: pip install -e '.[bench]' to compare with its MLM collator)")
        return rows
    tokens = torch.randint(vocab.first_ordinary, vocab.size, (batch, length))
    examples = [{"input_ids": row} for row in tokens]
    mlm_sec = float(rows[0]["ms/batch"]) / 1e3
    for label, fn in [
        ("HF DataCollatorForLanguageModeling(examples)", lambda: collator(examples)),
        ("HF collator.torch_mask_tokens(tensor)", lambda: collator.torch_mask_tokens(tokens.clone())),
    ]:
        sec = timed(fn, repeats)
        rows.append(
            {
                "objective": label,
                "batch": f"{batch}x{length}",
                "ms/batch": f"{sec * 1e3:.2f}",
                "M raw tokens/s": f"{tokens.numel() / sec / 1e6:.1f}",
            }
        )
        rows[-1]["objective"] += f"  [selfsup mlm is {sec / mlm_sec:.1f}x faster]"
    return rows


# ---------------------------------------------------------------------------- output head
def bench_head(shapes: list[tuple[int, int, int]], repeats: int, device: str = "cpu") -> list[dict]:
    """ms per forward+backward of (rows x d_model) hidden states through a vocab-way tied head."""
    rows_out = []
    for rows, d_model, vocab in shapes:
        weight = torch.nn.Parameter(torch.randn(vocab, d_model, device=device) * 0.02)
        hidden = torch.randn(rows, d_model, device=device, requires_grad=True)
        targets = torch.randint(0, vocab, (rows,), device=device)

        def sync():
            if device == "cuda":
                torch.cuda.synchronize()

        def dense():
            F.cross_entropy(hidden @ weight.t(), targets, reduction="sum").backward()
            sync()

        def fused():
            linear_cross_entropy(hidden, weight, targets, vocab, accuracy=False)[0].backward()
            sync()

        a, b = timed(dense, repeats) * 1e3, timed(fused, repeats) * 1e3
        rows_out.append(
            {
                "rows x d_model -> vocab": f"{rows} x {d_model} -> {vocab}",
                "dense ms": f"{a:.1f}",
                "fused ms": f"{b:.1f}",
                "dense / fused": f"{a / b:.2f}x",
            }
        )
    return rows_out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="selfsup-bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("objectives", help="tokens/s of each objective on one batch")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--length", type=int, default=512)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p = sub.add_parser("train", help="training tokens/s, FLOP/s and MFU per objective vs same-shape HF models")
    p.add_argument("--preset", choices=sorted(PRESETS), default="default")
    p.add_argument("--objectives", default="mlm,clm,span_corruption")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3, help="alternating selfsup/HF rounds; medians are reported")
    p.add_argument("--batch", type=int, help="override the preset's batch size")
    p.add_argument("--seq-len", type=int, help="override the preset's sequence length")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--precision", default="32-true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--no-hf", action="store_true", help="skip the Hugging Face comparison")
    p.add_argument("--out", help="also write the table to this file")
    p.add_argument("--threads", type=int, default=2)
    p = sub.add_parser(
        "parity", help="validation loss after identical training steps vs the export's transformers model"
    )
    p.add_argument("--architectures", default=",".join(PARITY))
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("overrides", nargs="*", help="settings for both models, e.g. optim.lr=1e-2")
    p.add_argument("--threads", type=int, default=2)
    p = sub.add_parser("head", help="dense vs fused output head + cross-entropy, forward and backward")
    p.add_argument(
        "--shapes", default="2048x128x4096,480x128x4096,2048x512x8192", help="comma-separated ROWSxD_MODELxVOCAB"
    )
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=2)
    p = sub.add_parser("data", help="token cache preparation: cold MB/s, warm start, peak RSS, vs tokenizers alone")
    p.add_argument("--sizes", default="10,200", help="comma-separated corpus sizes in MB")
    p.add_argument("--big", action="store_true", help="also 1,000 MB")
    p.add_argument("--dir", help="where the corpora are generated (kept, reused) and the caches built")
    p.add_argument("--threads", type=int, default=2)
    p = sub.add_parser("eval", help="the evaluation's seconds in warm one-step runs on growing corpora, by part")
    p.add_argument("--sizes", default="10,100", help="comma-separated corpus sizes in MB")
    p.add_argument("--objectives", default="mlm,clm,span_corruption")
    p.add_argument("--dir", help="where the corpora are generated (kept, reused) and the runs written")
    p.add_argument("--eval", default=None, help="the eval option measured (default: the default; jobs: selfsup-eval's)")
    p.add_argument("--sweep", help="a finished sweep: selfsup-eval on it, by part, beside the plan's estimate")
    p.add_argument(
        "--real-length",
        metavar="FOLDER",
        help="with --sweep: a task of 3,000 + 1,000 texts of ~128 tokens written to FOLDER, evaluated alone",
    )
    p.add_argument("overrides", nargs="*", help="eval.* overrides of the measured runs, e.g. eval.finetune.seeds=1")
    args = parser.parse_args(argv)
    if args.what == "eval":
        evaluation = ((f"eval={args.eval}",) if args.eval else ()) + tuple(args.overrides)
        if args.sweep:
            if args.real_length:
                evaluation += tuple(real_length_task(Path(args.real_length)))
            print(f"{os.cpu_count()} cores; selfsup-eval {args.sweep} {' '.join(evaluation)}")
            rows, plan = bench_sweep(args.sweep, evaluation)
            print_table(rows)
            print(plan)
            return
        print(f"{os.cpu_count()} cores; each run a fresh selfsup-train process, warm (token cache and baselines built)")
        print_table(
            bench_eval([int(x) for x in args.sizes.split(",")], args.objectives.split(","), args.dir, evaluation)
        )
        return
    if args.what == "data":
        sizes = [int(x) for x in args.sizes.split(",")] + ([1000] if args.big else [])
        print(f"{os.cpu_count()} cores; each run in a fresh process")
        print_table(bench_data(sizes, args.dir))
        return
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU'}"
    )
    if args.what == "objectives":
        print_table(bench_objectives(args.batch, args.length, args.repeats))
    elif args.what == "parity":
        seeds = [int(x) for x in args.seeds.split(",")]
        print(
            f"{args.steps} steps, seeds {args.seeds}, {' '.join(args.overrides) or 'conf/ defaults'}: validation "
            f"loss as mean +- sd over the seeds"
        )
        print_table(parity(args.architectures.split(","), args.steps, seeds, args.overrides))
    elif args.what == "head":
        shapes = [tuple(int(x) for x in shape.split("x")) for shape in args.shapes.split(",")]
        print_table(bench_head(shapes, args.repeats, args.device))
    elif args.what == "train":
        rows = bench_train(
            args.steps,
            args.warmup,
            args.preset,
            args.objectives.split(","),
            args.seq_len,
            args.batch,
            args.device,
            args.precision,
            args.compile,
            hf=not args.no_hf,
            rounds=args.rounds,
        )
        print_table(rows)
        if args.out:
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                print(f"selfsup-bench {' '.join(argv or sys.argv[1:])}")
                print_table(rows)
            Path(args.out).write_text(buffer.getvalue())


if __name__ == "__main__":
    main()
