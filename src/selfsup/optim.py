"""The optimizer and its schedule: the `optim` config group (conf/optim/adamw.yaml) instantiates one.

    optim = AdamWCosine(lr=1e-3)
    optimizer, scheduler = optim.build(model, total_steps=200)

Another optimizer is a class with the same three methods (`build`, `apply`, `clip`) and a config whose
`_target_` names it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional

import torch


@dataclass
class AdamWCosine:
    """AdamW (decoupled weight decay on matrices, none on biases and norms), linear warmup, cosine decay
    to min_lr_ratio x lr at lr_decay_steps (default: the run's trainer.max_steps), gradient clipping by
    global norm. Also the structured config of conf/optim/adamw.yaml."""

    _target_: str = "selfsup.optim.AdamWCosine"
    lr: float = 1e-3
    weight_decay: float = 0.1
    betas: List[float] = field(default_factory=lambda: [0.9, 0.95])
    warmup_steps: int = 20
    lr_decay_steps: Optional[int] = (
        None  # cosine length; default trainer.max_steps (keep it when resuming to train longer)
    )
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0  # max global gradient norm; 0: no clipping

    def factor(self, step: int, total: int) -> float:
        """Learning-rate multiplier at `step`: linear warmup to 1, cosine decay to min_lr_ratio at `total`."""
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        total = self.lr_decay_steps or total
        progress = min(1.0, (step - self.warmup_steps) / max(1, total - self.warmup_steps))
        return self.min_lr_ratio + (1 - self.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    def build(self, model: torch.nn.Module, total_steps: int, fused: bool = True):
        """(optimizer, scheduler) for the model's trainable parameters; fused: one kernel per step (CPU and
        CUDA; not with fp16's GradScaler, which unscales inside a fused step, after the lab's clipping)."""
        decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.lr,
            betas=(self.betas[0], self.betas[1]),
            fused=fused,
            foreach=None,
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: self.factor(step, total_steps))
        return optimizer, scheduler

    def apply(self, optimizer: torch.optim.Optimizer, scheduler) -> None:
        """These settings over an optimizer and scheduler a checkpoint restored (whose base learning rates
        come back from it): a resumed run trains at this lr, on this schedule, from its step on."""
        for group, decay in zip(optimizer.param_groups, (self.weight_decay, 0.0)):
            group.update(initial_lr=self.lr, weight_decay=decay, betas=tuple(self.betas))
        scheduler.base_lrs = [self.lr] * len(optimizer.param_groups)
        for group, factor in zip(optimizer.param_groups, (f(scheduler.last_epoch) for f in scheduler.lr_lambdas)):
            group["lr"] = self.lr * factor

    def clip(self, parameters: list[torch.Tensor], norm: torch.Tensor) -> None:
        """Scale the gradients so that their global norm (given: `norm`) is at most grad_clip."""
        if self.grad_clip:
            torch.nn.utils.clip_grads_with_norm_(parameters, self.grad_clip, norm, foreach=True)
