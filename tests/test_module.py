"""The shared cross-entropy step: exact values from the seeds, accumulation, zero-target batches."""

import math

import lightning as L
import pytest
import torch

from selfsup.data.vocab import Vocab
from selfsup.models import build_model
from selfsup.objectives import IGNORE, MaskedLM, ObjectiveBatch
from selfsup.optim import AdamWCosine
from selfsup.training.module import SelfSupModule, accumulate_gradients, cross_entropy_sums

V = Vocab(size=300, n_sentinels=10)


class FixedDistribution(torch.nn.Module):
    """Predicts the same distribution `probs` at every position: hidden = log probs, head = identity."""

    def __init__(self, probs: torch.Tensor):
        super().__init__()
        self.logits = torch.nn.Parameter(probs.log())
        self.vocab_size = len(probs)
        self.lm_head = torch.nn.Linear(self.vocab_size, self.vocab_size, bias=False)
        self.lm_head.weight.data.copy_(torch.eye(self.vocab_size))

    def forward(self, encoder_inputs=None, decoder_inputs=None, encoder_mask=None, prefix_length=None):
        x = encoder_inputs if encoder_inputs is not None else decoder_inputs
        return self.logits.expand(*x.shape, -1)


@pytest.mark.parametrize("p,loss", [(0.20, 1.609), (0.65, 0.431)])
def test_seed_worked_example_through_the_shared_step(p, loss):
    # "rates rose sharply today": mask "rose" (id 1); the model gives it probability p
    probs = torch.tensor([(1 - p) / 3, p, (1 - p) / 3, (1 - p) / 3])
    batch = ObjectiveBatch(
        targets=torch.tensor([[IGNORE, 1, IGNORE, IGNORE]]),
        n_inputs=torch.tensor(4),
        encoder_inputs=torch.tensor([[0, 3, 2, 0]]),
    )
    nll, n, _ = cross_entropy_sums(FixedDistribution(probs), batch)
    assert n.item() == 1
    assert (nll / n).item() == pytest.approx(loss, abs=5e-4)
    assert (nll / n).item() == pytest.approx(-math.log(p), rel=1e-6)
    assert math.exp((nll / n).item()) == pytest.approx(1 / p, rel=1e-6)  # perplexity = e^loss


def test_batch_without_scored_positions_gives_zero_not_nan():
    model = build_model("encoder", V.size, 16, d_model=32, n_layers=1, n_heads=2)
    batch = ObjectiveBatch(
        targets=torch.full((2, 8), IGNORE),
        n_inputs=torch.tensor(16),
        encoder_inputs=torch.randint(V.first_ordinary, V.size, (2, 8)),
    )
    nll_sum, _ = accumulate_gradients(model, [batch], total_scored=0)
    assert nll_sum.item() == 0.0
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_accumulation_normalises_by_total_scored_tokens_not_mean_of_means():
    torch.manual_seed(0)
    model = build_model("encoder", V.size, 32, d_model=32, n_layers=1, n_heads=2)
    tokens = torch.randint(V.first_ordinary, V.size, (6, 32))
    full = MaskedLM(V, 32, mask_rate=0.3)(tokens, torch.Generator().manual_seed(1))
    # uneven split: rows 0-1 lose most of their targets, rows 2-5 keep all
    targets = full.targets.clone()
    targets[:2, 4:] = IGNORE

    def part(rows):
        return ObjectiveBatch(targets=targets[rows], n_inputs=torch.tensor(0), encoder_inputs=full.encoder_inputs[rows])

    one, a, b = part(slice(0, 6)), part(slice(0, 2)), part(slice(2, 6))
    assert a.n_scored.item() != b.n_scored.item()
    total = one.n_scored.item()

    def grads(micro):
        model.zero_grad()
        nll, _ = accumulate_gradients(model, micro, total)
        return nll / total, [p.grad.clone() for p in model.parameters()]

    loss_one, g_one = grads([one])
    loss_acc, g_acc = grads([a, b])
    assert loss_acc.item() == pytest.approx(loss_one.item(), rel=1e-6)
    for x, y in zip(g_one, g_acc):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-7)
    # the mean of per-batch means differs: the test would catch that normalisation
    mean_of_means = (
        (cross_entropy_sums(model, a)[0] / a.n_scored) + (cross_entropy_sums(model, b)[0] / b.n_scored)
    ) / 2
    assert abs(mean_of_means.item() - loss_one.item()) > 1e-3


def test_uniform_model_has_perplexity_equal_to_vocabulary_size():
    """Validation over a real loader: a model with zero output weights is uniform over the vocabulary."""
    vocab = Vocab(size=1000, n_sentinels=10)  # 1000 real tokens, the head is padded to 1024
    model = build_model("encoder", vocab.size, 32, d_model=32, n_layers=1, n_heads=2, tie_embeddings=False)
    assert model.padded_vocab_size == 1024
    with torch.no_grad():
        model.lm_head.weight.zero_()
    module = SelfSupModule(model, MaskedLM(vocab, 32))
    data = torch.randint(vocab.first_ordinary, vocab.size, (40, 32))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    first = trainer.validate(module, loader, verbose=False)[0]
    assert first["val/perplexity"] == pytest.approx(1000, rel=1e-4)
    assert first["val/loss"] == pytest.approx(math.log(1000), rel=1e-5)
    assert first["val/signal_per_token"] == pytest.approx(0.15, abs=4 * math.sqrt(0.15 * 0.85 / data.numel()))


def test_validation_loss_is_token_weighted_over_unequal_batches():
    """val/loss = total NLL / total scored over the validation set: a batch with 16 scored tokens weighs 8x one
    with 2 (a mean of batch means, or a weighted MeanMetric that drops its weights, gives another value)."""
    probs = torch.tensor([0.2, 0.5, 0.1, 0.2])
    model = FixedDistribution(probs)

    def score_nonzero(tokens, generator):  # every non-zero token is its own target
        return ObjectiveBatch(
            targets=torch.where(tokens > 0, tokens, IGNORE),
            n_inputs=torch.tensor(tokens.numel()),
            encoder_inputs=tokens,
        )

    a, b = torch.zeros(2, 8, dtype=torch.long), torch.zeros(2, 8, dtype=torch.long)
    a[:, :] = 1  # 16 targets of probability 0.5
    b[0, :2] = 2  # 2 targets of probability 0.1
    module = SelfSupModule(model, score_nonzero)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    out = trainer.validate(module, torch.utils.data.DataLoader(torch.cat([a, b]), batch_size=2), verbose=False)[0]
    expected = (16 * -math.log(0.5) + 2 * -math.log(0.1)) / 18
    assert out["val/loss"] == pytest.approx(expected, rel=1e-6)
    assert out["val/perplexity"] == pytest.approx(math.exp(expected), rel=1e-6)
    assert out["val/accuracy"] == pytest.approx(16 / 18, rel=1e-6)  # argmax is token 1
    assert out["val/signal_per_token"] == pytest.approx(18 / 32, rel=1e-6)
    assert abs(out["val/loss"] - (-math.log(0.5) - math.log(0.1)) / 2) > 0.3  # not the mean of batch means


def test_validation_loss_of_a_nan_batch_is_nan():
    model = FixedDistribution(torch.tensor([0.25, 0.25, 0.25, 0.25]))
    with torch.no_grad():
        model.logits[1] = float("nan")

    def score_all(tokens, generator):
        return ObjectiveBatch(targets=tokens, n_inputs=torch.tensor(tokens.numel()), encoder_inputs=tokens)

    data = torch.tensor([[2, 3, 2, 3], [1, 1, 1, 1]])  # the second batch's loss is NaN
    module = SelfSupModule(model, score_all)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    out = trainer.validate(module, torch.utils.data.DataLoader(data, batch_size=1), verbose=False)[0]
    assert math.isnan(out["val/loss"])


def test_validation_uses_the_same_masks_every_time():
    torch.manual_seed(0)
    model = build_model("encoder", V.size, 32, d_model=32, n_layers=1, n_heads=2)
    module = SelfSupModule(model, MaskedLM(V, 32))
    loader = torch.utils.data.DataLoader(torch.randint(V.first_ordinary, V.size, (24, 32)), batch_size=8)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    a = trainer.validate(module, loader, verbose=False)[0]
    b = trainer.validate(module, loader, verbose=False)[0]
    assert a == b


def test_warmup_then_cosine():
    optim = AdamWCosine(warmup_steps=10, min_lr_ratio=0.1)
    assert optim.factor(0, 100) == pytest.approx(0.1)
    assert optim.factor(9, 100) == pytest.approx(1.0)
    assert optim.factor(100, 100) == pytest.approx(0.1)
    assert 0.1 < optim.factor(55, 100) < 1.0
    assert AdamWCosine(warmup_steps=10, lr_decay_steps=1000).factor(100, 100) > 0.9  # its own decay length


def test_sparse_head_equals_dense_head_loss_and_gradients():
    torch.manual_seed(0)
    model = build_model("encoder", V.size, 64, d_model=32, n_layers=2, n_heads=2)
    batch = MaskedLM(V, 64)(torch.randint(V.first_ordinary, V.size, (4, 64)), torch.Generator().manual_seed(0))
    nll, n, _ = cross_entropy_sums(model, batch)
    (nll / n).backward()
    sparse = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    logits = model.head(model(encoder_inputs=batch.encoder_inputs))  # every position, as a dense head does
    dense = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=IGNORE)
    dense.backward()
    assert (nll / n).item() == pytest.approx(dense.item(), abs=1e-5)
    for a, b in zip(sparse, (p.grad for p in model.parameters())):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_bf16_mixed_precision_trains_on_cpu():
    torch.manual_seed(0)
    model = build_model("decoder", V.size, 32, d_model=32, n_layers=1, n_heads=2)
    from selfsup.objectives import CausalLM

    module = SelfSupModule(model, CausalLM(V, 32), AdamWCosine(warmup_steps=1), max_steps=4)
    data = torch.randint(V.first_ordinary, V.size, (32, 33))
    trainer = L.Trainer(
        accelerator="cpu",
        precision="bf16-mixed",
        max_steps=4,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=8))
    assert trainer.global_step == 4 and torch.isfinite(torch.tensor(float(trainer.callback_metrics["train/loss"])))
    assert module.flops_per_batch > 0  # measured on the first batch
    assert trainer.optimizers[0].defaults["fused"]  # no gradient scaler in bf16: the fused AdamW


def test_the_last_step_is_validated_off_the_interval():
    """max_steps=5, val_check_interval=3: validation after steps 3 and 5, so a run's final val metrics
    (and best checkpoint) are those of its last step (Lightning alone would stop at 5 unvalidated)."""
    torch.manual_seed(0)
    model = build_model("encoder", V.size, 32, d_model=32, n_layers=1, n_heads=2)
    module = SelfSupModule(model, MaskedLM(V, 32), AdamWCosine(warmup_steps=1), max_steps=5)
    validated = []

    class Record(L.Callback):
        def on_validation_end(self, trainer, pl_module):
            validated.append(trainer.global_step)

    data = torch.randint(V.first_ordinary, V.size, (64, 32), generator=torch.Generator().manual_seed(0))
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=5,
        val_check_interval=3,
        check_val_every_n_epoch=None,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[Record()],
    )
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    trainer.fit(module, loader, loader)
    assert validated == [3, 5] and trainer.global_step == 5


def first_step(precision_or_plugin, grad_clip: float, max_steps: int = 1):
    """A real Trainer run of a tiny decoder; returns (module, trainer)."""
    from lightning.pytorch.plugins import Precision

    from selfsup.objectives import CausalLM

    torch.manual_seed(0)
    model = build_model("decoder", V.size, 32, d_model=32, n_layers=1, n_heads=2)
    module = SelfSupModule(
        model, CausalLM(V, 32), AdamWCosine(warmup_steps=1, grad_clip=grad_clip), max_steps=max_steps
    )
    data = torch.randint(V.first_ordinary, V.size, (8 * max_steps, 33), generator=torch.Generator().manual_seed(0))
    plugin = isinstance(precision_or_plugin, Precision)
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        logger=False,
        log_every_n_steps=1,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **({"plugins": [precision_or_plugin]} if plugin else {"precision": precision_or_plugin}),
    )
    trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=8))
    return module, trainer


def test_fp16_mixed_clips_unscaled_gradients():
    # fp16 autocast with a GradScaler (scale 2**16): Lightning's scaler must unscale before our
    # clipping, or the norm seen by the clip is 65536x too large and every update is crushed
    from lightning.pytorch.plugins import MixedPrecision

    fp32, t32 = first_step("32-true", grad_clip=0.5)
    fp16, t16 = first_step(
        MixedPrecision("16-mixed", "cpu", torch.amp.GradScaler("cpu", init_scale=2.0**16)), grad_clip=0.5
    )
    assert t16.precision_plugin.scaler is not None and t16.precision_plugin.scaler.get_scale() >= 2.0**15
    assert t32.optimizers[0].defaults["fused"] and not t16.optimizers[0].defaults["fused"]  # fused unscales too late
    norm32 = float(t32.callback_metrics["train/grad_norm"])
    norm16 = float(t16.callback_metrics["train/grad_norm"])
    assert norm32 > 0.5  # the clip is active
    assert norm16 == pytest.approx(norm32, rel=2e-2)
    torch.manual_seed(0)
    start = torch.cat(
        [p.flatten() for p in build_model("decoder", V.size, 32, d_model=32, n_layers=1, n_heads=2).parameters()]
    )
    step32 = torch.cat([p.flatten() for p in fp32.model.parameters()]) - start
    step16 = torch.cat([p.flatten() for p in fp16.model.parameters()]) - start
    assert step16.abs().sum() > 0  # the scaler did not skip the step
    assert torch.nn.functional.cosine_similarity(step32, step16, dim=0) > 0.99  # the same update, to fp16 rounding


def test_grad_norm_is_logged_before_clipping_and_the_update_is_clipped():
    clipped, trainer = first_step("32-true", grad_clip=1e-3)
    free, _ = first_step("32-true", grad_clip=0.0)
    norm = float(trainer.callback_metrics["train/grad_norm"])
    assert norm > 1e-3
    torch.manual_seed(0)
    start = build_model("decoder", V.size, 32, d_model=32, n_layers=1, n_heads=2)  # the same initial weights
    moved_clipped = sum((a - b).abs().sum() for a, b in zip(clipped.model.parameters(), start.parameters()))
    moved_free = sum((a - b).abs().sum() for a, b in zip(free.model.parameters(), start.parameters()))
    assert moved_clipped < moved_free  # AdamW's first step is ~lr*sign(g); clipping shrinks the eps-limited ones


@pytest.mark.parametrize(
    "objective,arch",
    [("mlm", "encoder"), ("clm", "decoder"), ("span_corruption", "encoder_decoder"), ("prefix_lm", "decoder")],
)
def test_the_flops_counted_before_training_are_those_of_a_training_step(objective, arch):
    """count_flops (a forward pass, before the first step) gives what FlopCounterMode counts over the step's
    forward and backward passes on the same batch (two micro-batches)."""
    from torch.utils.flop_counter import FlopCounterMode

    from selfsup.objectives import build_objective

    obj = build_objective(objective, V, 32)
    model = build_model(arch, V.size, obj.model_length, d_model=32, n_layers=2, n_heads=4)
    module = SelfSupModule(model, obj, accumulate=2)
    module.trainer = L.Trainer(accelerator="cpu", devices=1, logger=False)
    tokens = torch.randint(V.first_ordinary, V.size, (8, obj.raw_length), generator=torch.Generator().manual_seed(0))
    module.count_flops(tokens)
    micro = [obj(chunk, module.generator("flops", i)) for i, chunk in enumerate(tokens.chunk(2))]
    step = FlopCounterMode(display=False)
    with step:
        accumulate_gradients(model, micro, float(sum(b.n_scored for b in micro)))
    assert module.flops_per_batch == step.get_total_flops() > 0


def test_compiled_model_is_compiled_after_the_flop_count():
    """trainer.compile=true: FLOPs are counted under FlopCounterMode, a dispatch mode under which Dynamo
    marks the model's code to skip for good; the count runs eagerly, so the steps run the compiled graph."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from selfsup.objectives import CausalLM

    torch._dynamo.reset()
    counters.clear()
    flops = {}
    for compiled in (False, True):
        torch.manual_seed(0)
        model = build_model("decoder", V.size, 16, d_model=16, n_layers=1, n_heads=2)
        if compiled:  # Dynamo's eager backend: the same frame capture as inductor's, without its codegen
            model.compile(dynamic=False, backend="eager")
        module = SelfSupModule(model, CausalLM(V, 16), AdamWCosine(warmup_steps=1), max_steps=3)
        data = torch.randint(V.first_ordinary, V.size, (12, 17), generator=torch.Generator().manual_seed(0))
        trainer = L.Trainer(
            accelerator="cpu",
            max_steps=3,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=4))
        flops[compiled] = module.flops_per_batch
    assert counters["stats"]["unique_graphs"] >= 1 and counters["frames"]["ok"] >= 1  # a graph was compiled and ran
    assert flops[True] == flops[False] > 0  # the count is the eager model's
