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
                           same run with eval=none; --eval jobs: the downstream jobs' (conf/eval/jobs.yaml)
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
from selfsup.objectives import OBJECTIVES, build_objective
from selfsup.tools.bench_data import bench_data
from selfsup.tools.bench_eval import bench_eval
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


# ---------------------------------------------------------------------------- training step
def hf_model(
    objective: str,
    vocab_size: int,
    d_model: int,
    n_layers: int,
    n_heads: int,
    max_len: int,
    n_decoder_layers: int | None = None,
    d_ff: int | None = None,
):
    """The Hugging Face model of the same shape as ours for an objective (None without transformers)."""
    try:  # transformers is imported here, not at the top: it is the optional `bench` extra
        import transformers as tf
    except ImportError:
        return None
    d_ff = d_ff or 4 * d_model
    if objective == "mlm":
        return tf.BertForMaskedLM(
            tf.BertConfig(
                vocab_size=vocab_size,
                hidden_size=d_model,
                num_hidden_layers=n_layers,
                num_attention_heads=n_heads,
                intermediate_size=d_ff,
                max_position_embeddings=max_len,
                hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0,
                attn_implementation="sdpa",
            )
        )
    if objective == "clm":
        return tf.GPT2LMHeadModel(
            tf.GPT2Config(
                vocab_size=vocab_size,
                n_embd=d_model,
                n_layer=n_layers,
                n_head=n_heads,
                n_inner=d_ff,
                n_positions=max_len,
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
                attn_implementation="sdpa",
            )
        )
    return tf.T5ForConditionalGeneration(
        tf.T5Config(
            vocab_size=vocab_size,
            d_model=d_model,
            d_ff=d_ff,
            d_kv=d_model // n_heads,
            num_layers=n_layers,
            num_decoder_layers=n_decoder_layers or n_layers,
            num_heads=n_heads,
            dropout_rate=0.0,
            decoder_start_token_id=1,
            pad_token_id=0,
        )
    )


def hf_step(model, objective: str, batch, opt) -> None:
    if objective == "mlm":
        loss = model(input_ids=batch.encoder_inputs, labels=batch.targets).loss
    elif objective == "clm":
        # GPT-2 shifts labels itself: same [B, L] forward and backward, L-1 of L positions scored
        loss = model(input_ids=batch.decoder_inputs, labels=batch.decoder_inputs).loss
    else:
        loss = model(input_ids=batch.encoder_inputs, decoder_input_ids=batch.decoder_inputs, labels=batch.targets).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def conf_defaults(objective: str = "mlm") -> dict:
    """The lab's composed config for an objective (its default architecture, data=builtin), as a dict."""
    # Imported here, not at the top: hydra, omegaconf and selfsup.run.train add ~0.3 s to every selfsup-bench command
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from selfsup.run.schema import register
    from selfsup.run.train import CONF_DIR

    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return OmegaConf.to_container(compose("train", overrides=[f"objective={objective}"]), resolve=True)


PRESETS = {  # name: (d_model, n_layers, n_heads, seq_len, batch, vocab)
    "default": None,  # the lab's: conf/architecture/<arch>.yaml, conf/data/builtin.yaml
    "d512": (512, 4, 8, 256, 8, 8192),  # the CPU efficiency target's size
    "gpt2-small": (768, 12, 12, 1024, 8, 50304),  # GPT-2 small shape (124M decoder)
}


def bench_train(
    steps: int,
    warmup: int,
    preset: str,
    objectives: list[str],
    seq_len: int | None = None,
    batch: int | None = None,
    device: str = "cpu",
    precision: str = "32-true",
    compile: bool = False,
    hf: bool = True,
    rounds: int = 3,
) -> list[dict]:
    """Tokens/s of the Lightning step and of the HF loop, measured in `rounds` alternating rounds
    (selfsup, HF, selfsup, HF, ...) so a slow spell of a shared machine hits both; medians reported.
    preset "default" is the model and batch `selfsup-train` uses (read from conf/); seq_len and batch
    override the preset's."""
    # Imported here, not at the top: Lightning (also under selfsup.training.module and .throughput) takes ~5 s, and
    # selfsup.run.schema brings hydra (~0.3 s); only `selfsup-bench train` needs them
    import lightning as L
    from omegaconf import OmegaConf

    from selfsup.run.build import make
    from selfsup.run.schema import per_stack
    from selfsup.training.module import SelfSupModule
    from selfsup.training.throughput import cpu_matmul_peak, gpu_peak_flops

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    class Clock(L.Callback):
        def on_train_batch_start(self, trainer, *args):
            if trainer.global_step == warmup:
                sync()
                self.start = time.perf_counter()

        def on_train_end(self, trainer, *args):
            sync()
            self.seconds = time.perf_counter() - self.start

    if device == "cuda":
        peak = gpu_peak_flops(torch.device("cuda"), precision)
    else:
        peak = cpu_matmul_peak()
    lab_default = PRESETS[preset] is None  # sizes from conf/ (per architecture) instead of the preset's tuple
    if lab_default:
        data_conf = conf_defaults()["data"]
        vocab_size = data_conf["vocab_size"]
        seq_len, batch = seq_len or data_conf["seq_len"], batch or data_conf["batch_size"]
    else:
        d_model, n_layers, n_heads, preset_len, preset_batch, vocab_size = PRESETS[preset]
        seq_len, batch = seq_len or preset_len, batch or preset_batch
    vocab = Vocab(size=vocab_size)
    rows = []
    for objective in objectives:
        arch = OBJECTIVES[objective].architectures[0]
        obj = build_objective(objective, vocab, seq_len)
        gen = torch.Generator().manual_seed(0)
        data = torch.randint(vocab.first_ordinary, vocab.size, (batch * steps, obj.raw_length), generator=gen)
        batches = [obj(data[i * batch : (i + 1) * batch], gen).to(device) for i in range(steps)]
        # the model and optimizer as a run builds them: the architecture and optim groups' structured configs
        conf = conf_defaults(objective)
        if not lab_default:  # a size preset: equal depth budget, an encoder-decoder splits n_layers between its stacks
            conf["architecture"].update(
                d_model=d_model, n_heads=n_heads, d_ff=None, n_decoder_layers=None, n_layers=per_stack(n_layers, arch)
            )
        shape = make(OmegaConf.create(conf["architecture"]), "architecture")
        d_model, n_heads, layers = shape.d_model, shape.n_heads, shape.n_layers
        decoder_layers = shape.n_decoder_layers or layers
        tokens = batch * obj.raw_length * (steps - warmup)

        def ours() -> tuple[float, SelfSupModule]:
            torch.manual_seed(0)
            model = shape.build(vocab.size, obj.model_length)
            if compile:
                model.compile(dynamic=False)
            optim = make(OmegaConf.create({**conf["optim"], "warmup_steps": 10}), "optim")
            module = SelfSupModule(model, obj, optim, max_steps=steps)
            clock = Clock()
            trainer = L.Trainer(
                accelerator=device,
                devices=1,
                precision=precision,
                max_steps=steps,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                limit_val_batches=0,
                callbacks=[clock],
            )
            trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=batch, shuffle=False))
            return tokens / clock.seconds, module

        def theirs() -> tuple[float, torch.nn.Module] | None:
            torch.manual_seed(0)
            model_hf = hf_model(
                objective, vocab.size, d_model, layers, n_heads, obj.model_length + 1, decoder_layers, shape.d_ff
            )
            if model_hf is None:
                return None
            model_hf = model_hf.to(device).train()
            opt = torch.optim.AdamW(model_hf.parameters(), lr=1e-3, weight_decay=0.1)
            with torch.autocast(device, dtype=torch.bfloat16, enabled="bf16" in precision):
                for b in batches[:warmup]:
                    hf_step(model_hf, objective, b, opt)
                sync()
                start = time.perf_counter()
                for b in batches[warmup:]:
                    hf_step(model_hf, objective, b, opt)
                sync()
            return tokens / (time.perf_counter() - start), model_hf

        mine, hers = [], []
        for _ in range(rounds):
            speed, module = ours()
            mine.append(speed)
            measured = theirs() if hf else None
            if measured is not None:
                hers.append(measured[0])
                model_hf = measured[1]
        ours_speed = statistics.median(mine)
        flops = module.flops_per_batch * ours_speed / (batch * obj.raw_length)
        row = {
            "objective": objective,
            "shape": f"{arch} d{d_model} L{layers}{f'+{decoder_layers}' if arch == 'encoder_decoder' else ''} "
            f"H{n_heads} {shape.activation}{'' if shape.bias else ' no-bias'}",
            "batch": f"{batch}x{obj.raw_length}",
            "params": f"{module.model.num_parameters() / 1e6:.1f}M",
            "selfsup tokens/s": f"{ours_speed:,.0f}",
            "GFLOP/s": f"{flops / 1e9:,.1f}",
            "MFU" if device == "cuda" else "of matmul peak": f"{flops / peak:.0%}" if peak else "-",
        }
        if hers:
            ratios = sorted(a / b for a, b in zip(mine, hers))
            row.update(
                {
                    "HF model": type(model_hf).__name__,
                    "HF tokens/s": f"{statistics.median(hers):,.0f}",
                    "selfsup / HF": f"{ours_speed / statistics.median(hers):.2f}x",
                    "per round": f"{ratios[0]:.2f}-{ratios[-1]:.2f}x",
                }
            )
        rows.append(row)
    print(
        f"peak used for the last column: {(peak or 0) / 1e9:,.0f} GFLOP/s "
        f"({'device spec' if device == 'cuda' else 'measured fp32 matmul on this machine'}); "
        f"medians of {rounds} alternating rounds of {steps} steps ({warmup} untimed)"
    )
    return rows


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
    p.add_argument("overrides", nargs="*", help="eval.* overrides of the measured runs, e.g. eval.finetune.seeds=1")
    args = parser.parse_args(argv)
    if args.what == "eval":
        print(f"{os.cpu_count()} cores; each run a fresh selfsup-train process, warm (token cache and baselines built)")
        evaluation = ((f"eval={args.eval}",) if args.eval else ()) + tuple(args.overrides)
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
