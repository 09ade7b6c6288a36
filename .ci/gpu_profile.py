"""Where a compiled training step of the 124M decoder spends its GPU time (run by .ci/gpu-check).

A plain loop over the lab's own pieces (objective, model, fused head + cross-entropy, clipping, fused
AdamW) under bf16 autocast: step time, tokens/s; the model body alone and the fused head alone (forward
and backward each); then torch.profiler's kernels sorted by device time and how much of the step the
GPU is busy (a step far longer than its kernels is bound by the CPU launching them).
    python .ci/gpu_profile.py [--device cpu --d-model 64 --layers 1 --batch 2 --seq-len 64]  (CPU smoke run)
"""

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from selfsup.data.vocab import Vocab
from selfsup.loss import linear_cross_entropy
from selfsup.models import build_model
from selfsup.module import accumulate_gradients
from selfsup.objectives import build_objective

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda")
parser.add_argument("--d-model", type=int, default=768)
parser.add_argument("--layers", type=int, default=12)
parser.add_argument("--heads", type=int, default=12)
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--seq-len", type=int, default=1024)
parser.add_argument("--vocab", type=int, default=50304)
parser.add_argument("--no-compile", action="store_true")
args = parser.parse_args()
cuda = args.device == "cuda"
sync = torch.cuda.synchronize if cuda else (lambda: None)

vocab = Vocab(size=args.vocab)
objective = build_objective("clm", vocab, args.seq_len)
model = build_model("decoder", vocab.size, objective.model_length, d_model=args.d_model, n_layers=args.layers,
                    n_heads=args.heads).to(args.device)
if not args.no_compile:
    model.compile(dynamic=False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
gen = torch.Generator(device=args.device).manual_seed(0)
tokens = torch.randint(vocab.first_ordinary, vocab.size, (args.batch, objective.raw_length), device=args.device)


def step():
    batch = objective(tokens, gen)
    with torch.autocast(args.device, dtype=torch.bfloat16):
        accumulate_gradients(model, [batch], float(batch.n_scored), accuracy=False)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    opt.step()
    opt.zero_grad(set_to_none=True)


def timed(fn, repeats=10) -> float:
    for _ in range(3):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - start) / repeats


def body():  # the compiled model's forward and backward, a trivial loss instead of the head
    batch = objective(tokens, gen)
    with torch.autocast(args.device, dtype=torch.bfloat16):
        hidden = model(encoder_inputs=batch.encoder_inputs, decoder_inputs=batch.decoder_inputs,  # as the step
                       encoder_mask=batch.encoder_mask, prefix_length=batch.prefix_length)  # calls it: no recompile
    hidden.float().square().mean().backward()
    opt.zero_grad(set_to_none=True)


hidden = torch.randn(args.batch * args.seq_len, args.d_model, device=args.device, requires_grad=True)
targets = torch.randint(0, vocab.size, (hidden.shape[0],), device=args.device)


def head():  # the fused head + cross-entropy alone, forward and backward
    with torch.autocast(args.device, dtype=torch.bfloat16):
        nll, _ = linear_cross_entropy(hidden, model.lm_head.weight, targets, vocab.size, accuracy=False)
    nll.backward()
    opt.zero_grad(set_to_none=True)
    hidden.grad = None


seconds = timed(step)
print(f"step {seconds * 1e3:.1f} ms, {args.batch * objective.raw_length / seconds:,.0f} tokens/s "
      f"(batch {args.batch}x{objective.raw_length}, compile={not args.no_compile})", flush=True)
print(f"model body forward+backward {timed(body) * 1e3:.1f} ms; fused head forward+backward "
      f"{timed(head) * 1e3:.1f} ms", flush=True)
activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
with profile(activities=activities) as prof:
    start = time.perf_counter()
    for _ in range(3):
        step()
    sync()
    wall = (time.perf_counter() - start) / 3
events = prof.key_averages()
print(events.table(sort_by="self_cuda_time_total" if cuda else "self_cpu_time_total",
                   row_limit=30, max_name_column_width=80))
if cuda:
    busy = sum(e.self_device_time_total for e in events) / 3 / 1e3  # ms of kernels per step
    kernels = sum(e.count for e in events if e.self_device_time_total > 0) / 3
    print(f"GPU busy {busy:.1f} ms of a {wall * 1e3:.1f} ms step under the profiler ({busy / wall / 10:.0f}%), "
          f"{kernels:.0f} kernels per step")
