"""`selfsup-bench parity`: does the lab's model learn as well as the transformers model of the same shape?

For each architecture, the lab's model (built from conf/ as a run builds it) and its twin, the transformers class
that `selfsup-export` writes for it (built from the export's config, with transformers' own initialisation:
BERT-style N(0, 0.02) for GPT-2, Megatron-BERT and Blenderbot, T5's factor initialisation for T5), train in one
plain PyTorch loop on identical objective batches of the built-in corpus (the run's windows, the run's masks),
with the same optimizer, schedule and clipping (the optim group's AdamWCosine). Both are then scored on the same
validation batches: the token-weighted mean cross-entropy over their scored positions, as val/loss is.
"""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.loss import stream_seed

# each architecture with the objective it trains by default (t5: the architecture group's choice)
PARITY = {ENCODER: "mlm", DECODER: "clm", ENCODER_DECODER: "span_corruption", "t5": "span_corruption"}


def twin(model, architecture: str, vocab) -> torch.nn.Module:
    """The transformers model that `selfsup-export` writes for `model`, with transformers' own initialisation."""
    import transformers  # the `bench` extra: imported here, as the other benchmarks of transformers do

    from selfsup.interop.export import EXPORTERS, HF_CLASSES, exporter

    kind = exporter(model, architecture)
    config, _ = EXPORTERS[kind](model, SimpleNamespace(vocab=vocab))
    cls = getattr(transformers, HF_CLASSES[kind][1])
    hf = cls(cls.config_class(**config))
    if not config["tie_word_embeddings"] and hf.get_output_embeddings().weight is hf.get_input_embeddings().weight:
        # transformers 5 ties T5's head at construction whatever the config says: an untied head of its own,
        # initialised as T5 initialises one (N(0, 1))
        hf.config.tie_word_embeddings = False
        hf.lm_head.weight = torch.nn.Parameter(torch.randn_like(hf.lm_head.weight))
    return hf


def twin_sums(hf, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of -log p over the batch's scored positions, number scored) of a transformers model."""
    if batch.encoder_inputs is None:  # decoder: the lab's inputs and targets (GPT-2's own labels shift them)
        logits = hf(input_ids=batch.decoder_inputs).logits
    elif batch.decoder_inputs is None:  # encoder
        logits = hf(input_ids=batch.encoder_inputs, attention_mask=batch.encoder_mask).logits
    else:
        logits = hf(
            input_ids=batch.encoder_inputs, attention_mask=batch.encoder_mask, decoder_input_ids=batch.decoder_inputs
        ).logits
    scored = batch.scored
    nll = F.cross_entropy(logits[scored].float(), batch.targets[scored], reduction="sum")
    return nll, scored.sum()


def parity(
    architectures: list[str], steps: int, seeds: list[int], overrides: list[str] = (), val_batches: int = 20
) -> list[dict]:
    """One row per architecture: the validation loss of the lab's model and of its twin after `steps` identical
    steps, as mean +- standard deviation over `seeds` (each seed: both models' initialisation and the masks);
    overrides: settings for both (optim.lr=..., data.batch_size=..., architecture.init=...)."""
    # Imported here, not at the top: Lightning (selfsup.training.module, the data module) takes ~5 s, which the other
    # selfsup-bench commands do not pay
    from hydra import compose, initialize_config_dir

    from selfsup.data.datamodule import SelfSupDataModule
    from selfsup.run.build import make, prepare
    from selfsup.run.cli import CONF_DIR
    from selfsup.run.schema import register
    from selfsup.run.settings import RunSettings
    from selfsup.training.module import cross_entropy_sums

    register()
    rows = []
    for architecture in architectures:
        chosen = [f"objective={PARITY[architecture]}", f"architecture={architecture}", "eval=none", *overrides]
        with initialize_config_dir(str(CONF_DIR), version_base=None):
            cfg = compose("train", overrides=chosen)
        corpus, objective, _ = prepare(RunSettings.of(cfg), quiet=True)
        data = SelfSupDataModule(corpus)
        train_windows = [w for _, w in zip(range(steps), data.train_dataloader())]
        val_windows = [w for _, w in zip(range(val_batches), data.val_dataloader())]
        shape = make(cfg.architecture, "architecture")
        losses: dict[str, list[float]] = {"lab": [], "transformers": []}
        for seed in seeds:

            def batch(split: str, i: int, windows: torch.Tensor):
                return objective(windows, torch.Generator().manual_seed(stream_seed(seed, split, i)))

            train = [batch("train", i, w) for i, w in enumerate(train_windows)]
            val = [batch("val", i, w) for i, w in enumerate(val_windows)]
            torch.manual_seed(seed)
            lab = shape.build(corpus.vocab.size, max(objective.model_length, cfg.data.seq_len))
            torch.manual_seed(seed)
            hf = twin(lab, cfg.architecture.name, corpus.vocab)
            for name, model, sums in (
                ("lab", lab, lambda m, b: cross_entropy_sums(m, b, accuracy=False)[:2]),
                ("transformers", hf, twin_sums),
            ):
                losses[name].append(train_and_validate(model, sums, train, val, make(cfg.optim, "optim"), steps))
        lab_loss, hf_loss = (statistics.mean(losses[k]) for k in ("lab", "transformers"))
        spread = {k: statistics.stdev(v) if len(v) > 1 else float("nan") for k, v in losses.items()}
        rows.append(
            {
                "architecture": architecture,
                "objective": objective.name,
                "twin": type(hf).__name__,
                "params lab / twin": f"{lab.num_parameters() / 1e6:.2f}M / {hf.num_parameters() / 1e6:.2f}M",
                "lab val loss": f"{lab_loss:.3f} +- {spread['lab']:.3f}",
                "twin val loss": f"{hf_loss:.3f} +- {spread['transformers']:.3f}",
                "lab / twin - 1": f"{lab_loss / hf_loss - 1:+.1%}",
                "per seed": ", ".join(f"{a / b - 1:+.1%}" for a, b in zip(losses["lab"], losses["transformers"])),
            }
        )
    return rows


def train_and_validate(model, sums, train: list, val: list, optim, steps: int) -> float:
    """Train on `train` (one optimizer step per batch, the loss normalised by its scored targets, clipped and
    scheduled by `optim`), then the token-weighted mean loss over `val`."""
    optimizer, scheduler = optim.build(model, steps, fused=False)
    model.train()
    for batch in train:
        nll, scored = sums(model, batch)
        (nll / scored.clamp(min=1)).backward()  # the shared step's normalisation: by the batch's scored targets
        parameters = [p for p in model.parameters() if p.grad is not None]
        optim.clip(parameters, torch.nn.utils.get_total_norm([p.grad for p in parameters]))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
    model.eval()
    with torch.no_grad():
        totals = torch.stack([torch.stack([t.float() for t in sums(model, b)]) for b in val]).sum(0)
    return float(totals[0] / totals[1])
