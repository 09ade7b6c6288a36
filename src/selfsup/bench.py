"""Benchmarks: commands that print tables (never timed tests).

  selfsup-bench objectives   tokens/s of each objective on a 256x512 batch, beside transformers'
                             DataCollatorForLanguageModeling (needs the `bench` extra)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from selfsup.data.vocab import Vocab
from selfsup.objectives import build_objective


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
    from tokenizers import Tokenizer, models
    from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerFast

    from selfsup.data.vocab import special_tokens

    names = special_tokens(vocab.n_sentinels)
    words = {t: i for i, t in enumerate(names)}
    words.update({f"w{i}": i for i in range(len(names), vocab.size)})
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(words, unk_token="<pad>")),
                                  pad_token="<pad>", bos_token="<s>", eos_token="</s>", mask_token="<mask>",
                                  additional_special_tokens=names[4:])
    return DataCollatorForLanguageModeling(tok, mlm=True, mlm_probability=0.15, return_tensors="pt")


def bench_objectives(batch: int, length: int, repeats: int) -> list[dict]:
    vocab = Vocab(size=32_000)
    rows = []
    for name, kwargs in [("mlm", {}), ("mlm", {"whole_word": True}), ("clm", {}),
                         ("span_corruption", {}), ("prefix_lm", {}), ("ul2", {})]:
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
        rows.append({"objective": label, "batch": f"{batch}x{obj.raw_length}", "ms/batch": f"{sec * 1e3:.2f}",
                     "M raw tokens/s": f"{tokens.numel() / sec / 1e6:.1f}"})
    try:
        collator = hf_collator(vocab)
    except ImportError:
        print("(transformers not installed: pip install -e '.[bench]' to compare with its MLM collator)")
        return rows
    tokens = torch.randint(vocab.first_ordinary, vocab.size, (batch, length))
    examples = [{"input_ids": row} for row in tokens]
    mlm_sec = float(rows[0]["ms/batch"]) / 1e3
    for label, fn in [("HF DataCollatorForLanguageModeling(examples)", lambda: collator(examples)),
                      ("HF collator.torch_mask_tokens(tensor)", lambda: collator.torch_mask_tokens(tokens.clone()))]:
        sec = timed(fn, repeats)
        rows.append({"objective": label, "batch": f"{batch}x{length}", "ms/batch": f"{sec * 1e3:.2f}",
                     "M raw tokens/s": f"{tokens.numel() / sec / 1e6:.1f}"})
        rows[-1]["objective"] += f"  [selfsup mlm is {sec / mlm_sec:.1f}x faster]"
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="selfsup-bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("objectives", help="tokens/s of each objective on one batch")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--length", type=int, default=512)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    if args.what == "objectives":
        print_table(bench_objectives(args.batch, args.length, args.repeats))


if __name__ == "__main__":
    main()
