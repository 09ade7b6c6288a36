"""A run's settings, typed once, at the door.

`selfsup.run.build.settle(cfg, overrides)` runs the check sequence (the command's overrides, the settings, the
objective) on the composed config and returns a frozen `RunSettings`: each group as a plain object (the schema's dataclasses, the
`_target_` groups as plain mappings for `build.make`) and the resolved plain dict that checkpoints, W&B and DDP
workers receive. Everything after the door takes `RunSettings` or one of its fields, never the composed config.
A record written before a setting existed (a resume, a DDP worker's resolved config) gets that setting's default.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from omegaconf import DictConfig, OmegaConf

from selfsup.data.config import DataConfig
from selfsup.run.schema import LoggerConfig, TrainConfig, TrainerConfig


def typed(cls: type, values: dict | None):
    """`cls` from the settings of a record: a key the record lacks takes its default (an older record), a key the
    class no longer has is not read (as before it was typed)."""
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in (values or {}).items() if k in known})


@dataclass(frozen=True)
class RunSettings:
    """What selfsup-train's run is made from, each group as a plain object."""

    objective: dict  # the objective group: _target_ and settings (built with the run's vocabulary: build.make)
    architecture: dict  # the architecture group: _target_ and settings (name: encoder | decoder | encoder_decoder)
    data: DataConfig
    trainer: TrainerConfig
    optim: dict  # the optim group: _target_ and settings
    logger: LoggerConfig
    eval: dict  # the eval group (build.make_evaluation)
    callbacks: dict | None  # the Trainer's callbacks by name, each a _target_ and settings (None: a record from before)
    seed: int
    optimized_metric: str
    trial: dict | None  # the selfsup_optuna sweeper's trial of this job
    ckpt_path: str | None
    init_from: str | None  # init.from: a transformers checkpoint the run starts from
    resume: str | None
    resolved: dict  # the whole resolved config: what checkpoints, W&B and DDP workers receive

    @classmethod
    def of(cls, cfg: DictConfig | dict) -> RunSettings:
        """The typed settings of a composed config, or of a resolved record (a DDP worker's)."""
        plain = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
        plain.pop("hydra", None)
        return cls(
            objective=plain["objective"],
            architecture=plain["architecture"],
            data=typed(DataConfig, plain.get("data")),
            trainer=typed(TrainerConfig, plain.get("trainer")),
            optim=plain["optim"],
            logger=typed(LoggerConfig, plain.get("logger")),
            eval=plain.get("eval") or {},
            callbacks=plain.get("callbacks") if "callbacks" in plain else None,
            seed=plain.get("seed", TrainConfig.seed),
            optimized_metric=plain.get("optimized_metric", TrainConfig.optimized_metric),
            trial=plain.get("trial"),
            ckpt_path=plain.get("ckpt_path"),
            init_from=(plain.get("init") or {}).get("from"),
            resume=plain.get("resume"),
            resolved=plain,
        )

    @property
    def family(self) -> str:
        """The architecture's family: encoder | decoder | encoder_decoder."""
        return self.architecture["name"]

    def get(self, key: str) -> Any:
        """A setting of the resolved config by its dotted key (`objective.mask_rate`), None where there is none."""
        node: Any = self.resolved
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node
