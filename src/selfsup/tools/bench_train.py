"""`selfsup-bench train`: tokens/s of the Lightning step per objective, beside same-shape Hugging Face models."""

from __future__ import annotations

import statistics
import time

import torch

from selfsup.data.vocab import Vocab
from selfsup.objectives import OBJECTIVES, build_objective


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
    # Imported here, not at the top: hydra, omegaconf and selfsup.run.cli add ~0.3 s to every selfsup-bench command
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from selfsup.run.cli import CONF_DIR
    from selfsup.run.schema import register

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
