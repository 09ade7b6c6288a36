"""The LightningModule: the one shared cross-entropy step, for every objective.

    loss = sum of -log p(target) over scored positions / number of scored positions

The normalisation is by the total number of scored tokens of the optimizer step, across
gradient-accumulation micro-batches and devices (not a mean of per-batch means). A batch with no
scored position contributes nothing and never produces NaN. The output head is evaluated only at
scored positions (15% of MLM positions need 15% of the head's work).

Objectives run here, on the training device, with a generator seeded from (seed, stream, step,
micro-batch, rank): masks are reproducible, resume is exact, and validation sees the same masks
at every evaluation.
"""

from __future__ import annotations

import math

import lightning as L
import torch
from lightning.pytorch.loggers import WandbLogger
from torch.utils.flop_counter import FlopCounterMode
from torchmetrics import SumMetric

from selfsup.common.upstream import align_log_step
from selfsup.evaluation.job_scores import WRITTEN_COLUMNS
from selfsup.evaluation.suite import EXAMPLE_COLUMNS
from selfsup.loss import linear_cross_entropy, stream_seed
from selfsup.objectives import Objective, ObjectiveBatch
from selfsup.optim import AdamWCosine
from selfsup.reliability.callbacks import NonFiniteGuard
from selfsup.training.strategies import shard


def cross_entropy_sums(
    model: torch.nn.Module, batch: ObjectiveBatch, accuracy: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sum of -log p over scored positions, number scored, number predicted correctly).

    The output head runs only at scored positions (all of them for CLM, ~15% for MLM), fused with
    the cross-entropy (selfsup.loss) so the [scored, vocab] logits are never stored.
    """
    hidden = model(
        encoder_inputs=batch.encoder_inputs,
        decoder_inputs=batch.decoder_inputs,
        encoder_mask=batch.encoder_mask,
        prefix_length=batch.prefix_length,
    )
    scored = batch.scored
    if scored.all():  # every position scored: no gather and scatter of the hidden states
        hidden, targets = hidden.flatten(0, 1), batch.targets.flatten()
    else:
        hidden, targets = hidden[scored], batch.targets[scored]
    nll, correct = linear_cross_entropy(hidden, model.lm_head.weight, targets, model.vocab_size, accuracy)
    return nll, targets.new_tensor(targets.numel()), correct


def accumulate_gradients(
    model: torch.nn.Module,
    micro: list[ObjectiveBatch],
    total_scored: float,
    world_size: int = 1,
    backward=torch.Tensor.backward,
    accuracy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backward over micro-batches so the gradient is that of (sum of -log p) / total_scored.

    total_scored counts the scored targets of all micro-batches on all devices; DDP averages the
    gradients of the ranks, hence the factor world_size. Returns this device's (nll sum, correct).
    """
    scale = world_size / max(total_scored, 1.0)
    nll_sum = correct = torch.zeros((), device=micro[0].targets.device)
    for batch in micro:
        nll, _, right = cross_entropy_sums(model, batch, accuracy)
        backward(nll * scale)
        nll_sum, correct = nll_sum + nll.detach(), correct + right
    return nll_sum, correct


class SelfSupModule(L.LightningModule):
    def __init__(
        self,
        model: torch.nn.Module,
        objective: Objective,
        optim: AdamWCosine | None = None,
        *,
        max_steps: int = 1000,
        accumulate: int = 1,
        seed: int = 0,
        max_tokens: int | None = None,
        max_flops: float | None = None,
        evaluation=None,
        spent: tuple[float, float] = (0.0, 0.0),
    ):
        super().__init__()
        self.automatic_optimization = False  # to normalise by scored tokens across micro-batches
        self.model = model
        self.objective = objective
        self.optim = optim or AdamWCosine()  # optimizer, schedule and clipping (selfsup.optim)
        self.max_steps, self.accumulate, self.seed = max_steps, accumulate, seed
        self.max_tokens = max_tokens  # stop once this many input tokens were read (equal-text comparisons)
        self.max_flops = max_flops  # stop once this many training FLOPs were spent (equal-compute comparisons)
        # the FLOPs and input tokens of the runs this one continues (init.from=RUN_DIR): the budgets count them
        self.spent_flops, self.spent_tokens = spent
        self.evaluation = evaluation  # selfsup.evaluation.Evaluation: fixed exam and probes, at validations
        self.tokens_seen = 0  # global input tokens consumed by training so far
        self.targets_seen = 0  # global scored targets so far
        self.flops_seen = 0.0  # global training FLOPs so far (the first batch's count per step)
        self.planned_steps = None  # the steps max_steps or a max_flops / max_tokens budget allows (count_flops)
        # val/loss = total NLL / total scored over the whole validation set, as sums (a weighted MeanMetric with
        # nan_strategy="disable" drops its weights, torchmetrics#3434); a NaN batch makes it NaN (torchmetrics'
        # default would drop it, with a warning)
        self.val_nll = SumMetric(nan_strategy="disable")
        self.val_correct = SumMetric(nan_strategy="disable")
        self.val_scored = SumMetric(nan_strategy="disable")
        self.val_inputs = SumMetric(nan_strategy="disable")
        self.flops_per_batch = (
            None  # counted before the first step (count_flops); read by selfsup.training.throughput.TokenThroughput
        )
        self.resume_record = None  # config/vocabulary/tokenizer fingerprint stored in checkpoints
        self.nonfinite = None  # the NonFiniteGuard callback, when the trainer has one
        self._grad_norm = None  # global gradient norm of the last step, before clipping
        self._grad_norm_before_step = None

    # ------------------------------------------------------------------ masks
    def generator(self, stream: str, *index: int) -> torch.Generator:
        return torch.Generator(device=self.device).manual_seed(stream_seed(self.seed, stream, *index, self.global_rank))

    def micro_batches(self, tokens: torch.Tensor, stream: str, *index: int) -> list[ObjectiveBatch]:
        """The objective's batches of the trainer.accumulate chunks of tokens, each masked from its own stream."""
        return [
            self.objective(chunk, self.generator(stream, *index, i))
            for i, chunk in enumerate(tokens.chunk(self.accumulate))
        ]

    def scheduled_rate(self, step: int | None, total: int | None = None) -> float | None:
        """The objective's rate on objective.schedule at `step` (None: validation's), set on it; None without one
        (an objective may be any function of tokens and a generator)."""
        at_step = getattr(self.objective, "at_step", None)
        return at_step(step, total) if at_step is not None else None

    # ------------------------------------------------------------------ training
    def training_step(self, tokens: torch.Tensor, batch_idx: int) -> torch.Tensor:
        opt, sched = self.optimizers(), self.lr_schedulers()
        step = self.global_step
        # objective.schedule's rate at this step, if any: over the steps trainer.max_steps or a budget allows
        rate = self.scheduled_rate(step, self.planned_steps or self.max_steps)
        micro = self.micro_batches(tokens, "train", step)
        local = torch.stack([torch.stack([b.n_scored, b.n_inputs]) for b in micro]).sum(0).float()
        total_scored, total_inputs = self.trainer.strategy.reduce(local, reduce_op="sum").tolist()
        # accuracy costs an argmax: only when the loggers write (every log_every_n_steps, as Lightning decides)
        logging = (self.global_step + 1) % self.trainer.log_every_n_steps == 0 or self.trainer.should_stop
        nll_sum, correct = accumulate_gradients(
            self.model, micro, total_scored, self.trainer.world_size, backward=self.manual_backward, accuracy=logging
        )
        sums = self.trainer.strategy.reduce(torch.stack([nll_sum, correct.float()]), reduce_op="sum")
        loss = sums[0] / max(total_scored, 1.0)
        # a finite loss can still give non-finite gradients (a huge learning rate): both are checked before
        # the optimizer step, so non-finite values never reach the weights. fp16's GradScaler unscales in
        # opt.step (it skips steps with inf gradients itself); else the norm computed here is also the one
        # that clips (on_before_optimizer_step)
        self._grad_norm_before_step = None if self._scaled_gradients() else self.gradient_norm(opt)
        checked = (
            loss
            if self._grad_norm_before_step is None
            else torch.stack([loss, self._grad_norm_before_step.to(loss.device)])
        )
        if self.nonfinite is not None and self.nonfinite.check(checked, self.trainer):
            opt.zero_grad(set_to_none=True)  # skip this batch: no optimizer or scheduler step
            return None
        opt.step()  # clips in on_before_optimizer_step, after a mixed-precision scaler has unscaled
        opt.zero_grad(set_to_none=True)
        sched.step()

        self.tokens_seen += int(total_inputs)
        self.targets_seen += int(total_scored)
        self.flops_seen += self.flops_per_batch or 0.0
        last = self.global_step >= self.trainer.max_steps > 0
        if (
            last
            or (self.max_tokens and self.spent_tokens + self.tokens_seen >= self.max_tokens)
            or (self.max_flops and self.spent_flops + self.flops_seen >= self.max_flops)
        ):
            # stopping this way, Lightning validates once more (at max_steps alone it would not): the
            # run's final val metrics and best checkpoint are those of its last step
            self.trainer.should_stop = True
        metrics = {
            "train/loss": loss,
            "train/perplexity": torch.exp(loss),
            "train/signal_per_token": total_scored / max(total_inputs, 1.0),
            "train/tokens_seen": float(self.tokens_seen),
            "train/targets_seen": float(self.targets_seen),
            "train/flops_seen": self.flops_seen,
            "train/lr": sched.get_last_lr()[0],
        }
        if rate is not None:  # train/mask_rate: this step's rate (MLM's mask rate, span corruption's noise density)
            metrics[f"train/{self.objective.scheduled}"] = rate
        if logging:
            metrics["train/accuracy"] = sums[1] / max(total_scored, 1.0)
            if self._grad_norm is not None:
                metrics["train/grad_norm"] = self._grad_norm
        # Each self.log call costs Lightning ~1 ms: log the metrics only when the loggers write them
        # (every trainer.log_every_n_steps) and on the last step (selfsup.training.console prints from the step's output).
        if logging or self.trainer.should_stop:
            self.log_dict(metrics, on_step=True, on_epoch=False, rank_zero_only=True)
        return loss

    def count_flops(self, tokens: torch.Tensor) -> None:
        """The training FLOPs of a step (all ranks), counted by FlopCounterMode once, on the first batch before its
        step, from the forward pass: the backward pass does two matmuls per forward one (the fused head does its
        three in the forward pass when gradients are wanted, one without) and FlopCounterMode's 2.5 attentions
        per forward one (its kernels recompute the scores). Counted in eval mode (dropout draws no random numbers)
        and eagerly (Dynamo does not trace under FlopCounterMode)."""
        micro = self.micro_batches(tokens, "flops")
        counter, training = FlopCounterMode(display=False), self.model.training
        self.model.eval()
        with torch.no_grad(), torch.compiler.set_stance("force_eager"), counter:
            for batch in micro:
                cross_entropy_sums(self.model, batch, accuracy=False)
        self.model.train(training)
        by_op = counter.get_flop_counts().get("Global", {})
        attention = sum(n for op, n in by_op.items() if "scaled_dot_product" in str(op))
        forward = counter.get_total_flops()
        self.flops_per_batch = (3 * (forward - attention) + 3.5 * attention) * self.trainer.world_size
        inputs = torch.stack([b.n_inputs for b in micro]).sum().float()
        self.fit_schedule_to_budget(float(self.trainer.strategy.reduce(inputs, reduce_op="sum")))

    def fit_schedule_to_budget(self, inputs_per_step: float) -> None:
        """A run that trainer.max_flops or trainer.max_tokens stops before max_steps decays its learning rate to
        the step at which it reaches that budget (known once the first step is counted), unless
        optim.lr_decay_steps says otherwise: runs at equal compute each get their whole schedule."""
        steps = [self.max_steps] if self.max_steps > 0 else []
        if self.max_flops and self.flops_per_batch:
            steps.append(math.ceil((self.max_flops - self.spent_flops) / self.flops_per_batch))
        if self.max_tokens and inputs_per_step:
            steps.append(math.ceil((self.max_tokens - self.spent_tokens) / inputs_per_step))
        self.planned_steps = min(steps) if steps else None  # an objective.schedule without steps spans them
        if not hasattr(self.optim, "lr_decay_steps") or self.optim.lr_decay_steps is not None:
            return
        if steps and min(steps) < self.max_steps:
            self.optim.lr_decay_steps = min(steps)

    def configure_model(self) -> None:
        mesh = self.device_mesh  # set by the FSDP strategy (selfsup.training.strategies), else None
        if mesh is not None:
            shard(self.model, mesh)

    def on_before_optimizer_step(self, optimizer) -> None:
        """Gradient clipping by global norm. Lightning calls this hook after its fp16 GradScaler has
        unscaled the gradients (clipping in training_step would clip scaled ones, Lightning #18089);
        under FSDP the parameters are sharded DTensors and the norm is over all shards."""
        norm = self._grad_norm_before_step
        if norm is None:  # fp16: the gradients were unscaled just now
            norm = self.gradient_norm(optimizer)
        # the optimizer's parameter list: flat, unlike self.parameters(), which walks every submodule
        self.optim.clip([p for group in optimizer.param_groups for p in group["params"]], norm)
        self._grad_norm = norm.detach()  # before clipping; logged with the other train metrics

    @staticmethod
    def gradient_norm(optimizer) -> torch.Tensor:
        """The global L2 norm of the gradients of the optimizer's parameters (over all FSDP shards)."""
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads, foreach=True) if grads else torch.zeros(())
        return norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP2: a DTensor over the shards

    def _scaled_gradients(self) -> bool:
        """fp16 mixed precision: the gradients are scaled until the optimizer step unscales them."""
        return str(self.trainer.precision) in ("16-mixed", "16")

    # ------------------------------------------------------------------ validation
    def validation_step(self, tokens: torch.Tensor, batch_idx: int) -> None:
        self.scheduled_rate(None)  # a scheduled rate at its end value: val/loss is one series over the run
        batch = self.objective(tokens, self.generator("val", batch_idx))  # same masks every evaluation
        nll, n, correct = cross_entropy_sums(self.model, batch)
        self.val_nll.update(nll)
        self.val_correct.update(correct)
        self.val_scored.update(n)
        self.val_inputs.update(batch.n_inputs)

    def on_validation_epoch_end(self) -> None:
        scored = self.val_scored.compute()  # a validation set without a scored position gives NaN, not 0
        loss = self.val_nll.compute() / scored
        metrics = {
            "val/loss": loss,
            "val/perplexity": torch.exp(loss),
            "val/accuracy": self.val_correct.compute() / scored,
            "val/signal_per_token": scored / self.val_inputs.compute().clamp(min=1),
        }
        for metric in (self.val_nll, self.val_correct, self.val_scored, self.val_inputs):
            metric.reset()
        self.log_dict(metrics)
        # the x-axes in the same row, so every val point has its tokens seen in W&B and the CSV
        self.log_dict(
            {
                "train/tokens_seen": float(self.tokens_seen),
                "train/targets_seen": float(self.targets_seen),
                "train/flops_seen": self.flops_seen,
            },
            rank_zero_only=True,
        )
        # trainer.validate: the final validation of a run resumed at its last step (train.fit), or the validation
        # before the first step (trainer.validate_at_start: the starting model's scores, not counted by `due`)
        validating = self.trainer.state.fn == "validate"  # (trainer.validating: fit's too)
        start = validating and self.trainer.global_step == 0
        last = self.trainer.should_stop or validating
        if self.evaluation is not None and (start or self.evaluation.due(last=last)):
            results = self.evaluation(self.model)
            if results is None:  # a stop signal ended it (the PreemptionHandler saves the checkpoint next)
                return
            self.last_eval = (self.trainer.global_step, results)  # (for the console's line)
            self.log_dict(results, rank_zero_only=True)
            if self.trainer.is_global_zero:
                if self.evaluation.examples:
                    self.log_examples("eval/predictions", EXAMPLE_COLUMNS, self.evaluation.examples)
                for name, rows in self.evaluation.written_examples.items():
                    self.log_examples(f"eval/{name}/predictions", ["step", *WRITTEN_COLUMNS], rows)

    def log_examples(self, key: str, columns: list[str], rows: list[list]) -> None:
        """An evaluation's example predictions as the W&B Table `key` (one per evaluation): eval/predictions (the
        fixed exam's), eval/<job>/predictions (each generation job's)."""
        step = self.trainer.global_step
        for logger in self.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_table(key, columns=columns, data=[[step, *row] for row in rows], step=step)

    # ------------------------------------------------------------------ optimizer, state
    def configure_optimizers(self):
        opt, sched = self.optim.build(self.model, self.max_steps, fused=not self._scaled_gradients())
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_fit_start(self) -> None:
        self.nonfinite = NonFiniteGuard.find(self.trainer)

    def on_train_start(self) -> None:
        self._align_log_step = True
        for metric in (self.val_nll, self.val_correct, self.val_scored, self.val_inputs):
            metric.reset()  # states a validation before training reset in inference mode: fit's cannot add to them
        # this run's optimizer settings, also over those a resumed checkpoint restored: `resume=RUN
        # optim.lr=...` trains at the new rate, on the new schedule, from the restored step on
        self.optim.apply(self.optimizers(use_pl_optimizer=False), self.lr_schedulers())

    def on_train_batch_start(self, tokens: torch.Tensor, batch_idx: int) -> None:
        if self.flops_per_batch is None:
            self.count_flops(tokens)
        if getattr(self, "_align_log_step", False):
            # A checkpoint saved at a batch end stores Lightning's logging-step counter before that
            # batch counts, so a resumed run would log its first step under the previous number.
            align_log_step(self.trainer)
            self._align_log_step = False

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["selfsup"] = {
            "tokens_seen": self.tokens_seen,
            "targets_seen": self.targets_seen,
            "flops_seen": self.flops_seen,
            **(self.resume_record or {}),
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("selfsup", {})
        self.tokens_seen = state.get("tokens_seen", 0)
        self.targets_seen = state.get("targets_seen", 0)
        self.flops_seen = state.get("flops_seen", 0.0)
