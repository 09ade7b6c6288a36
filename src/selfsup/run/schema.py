"""Structured configs: the schema Hydra checks every key and type against.

Each setting's default is set once: the trainer's and logger's here, the data group's in selfsup.data.config,
the eval group's in selfsup.evaluation.config, each objective's, the architecture's and the optimizer's in their
own classes; the YAML files under conf/ set only what their choice changes, one swappable thing per file. A
typo'd key or a value of the wrong type is refused by Hydra with the key's full name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from selfsup.common.names import ENCODER_DECODER, HYDRA_DIR
from selfsup.data.config import DataConfig
from selfsup.evaluation.config import EvalConfig
from selfsup.models import TransformerConfig
from selfsup.objectives import CONFIGS
from selfsup.optim import AdamWCosine
from selfsup.training.distributed import shared_job_id


@dataclass
class TrainerConfig:
    accelerator: str = "cpu"
    devices: Any = 1
    num_nodes: int = 1
    strategy: str = "auto"
    precision: str = "32-true"
    max_steps: int = 200
    max_tokens: Optional[int] = None  # also stop after this many input tokens (compare objectives on equal text)
    max_flops: Optional[float] = None  # also stop after this many training FLOPs (equal compute; train/flops_seen)
    val_check_interval: int = 50  # steps between evaluations
    limit_val_batches: Any = 1.0  # fraction or number of validation batches
    log_every_n_steps: int = 10
    accumulate: int = 1  # gradient-accumulation micro-batches per step
    progress_bar: bool = True  # progress lines on stderr, a live line on a terminal (selfsup.training.console)
    progress_every_n_steps: Optional[int] = None  # a progress line every N steps (default: about 20 per run)
    compile: bool = False  # torch.compile the model (lengths that vary: dynamic shapes)
    checkpoint_every_n_steps: Optional[int] = (
        None  # last.ckpt every N steps (default: at each evaluation) and at the end
    )
    nonfinite: str = "stop"  # NaN/inf loss: stop (the checkpoints keep finite weights) | skip the batch
    nonfinite_max_skips: int = 10  # skip: at most this many non-finite batches in a row, then stop
    validate_at_start: Optional[bool] = None  # val/... and eval/... at step 0 (null: with init.from)


@dataclass
class LoggerConfig:
    wandb: bool = True
    csv: bool = True
    mode: str = "auto"  # auto (online only with an API key) | offline | online | disabled
    project: str = "selfsup"
    entity: Optional[str] = None
    name: Optional[str] = None  # default: <objective>-<architecture>[-<overrides>]
    group: Optional[str] = None  # default: the sweep dir of a multirun
    tags: List[str] = field(default_factory=list)
    timeout: Optional[float] = 300.0  # s a W&B call may take; then its stuck service is stopped, training goes on
    log_model: bool = False  # the best and last checkpoints (and tokenizer) as a W&B model artifact
    log_export: bool = False  # with log_model: also the Hugging Face export (<run dir>/hf), artifact hf-<id>


@dataclass
class TrainConfig:
    # an objective and an architecture are each a config with a _target_ (the built-in ones: the schemas
    # stored below; yours: any class, see docs/extending.md)
    objective: Any = MISSING
    architecture: Any = MISSING
    data: DataConfig = field(default_factory=DataConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    optim: Any = MISSING  # conf/optim/: a config with a _target_ (adamw: selfsup.optim.AdamWCosine)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)  # conf/eval/: default (fixed exam + built-in probe) | none
    callbacks: Dict[str, Any] = field(default_factory=dict)  # conf/callbacks/: the Trainer's, by name, each a _target_
    seed: int = 0
    optimized_metric: str = "val/loss"  # the value a sweep's job returns (Optuna's objective)
    trial: Optional[Any] = None  # set by the selfsup_optuna sweeper: {storage, study, id} of this job's trial
    ckpt_path: Optional[str] = None  # start from this checkpoint, in a new run dir
    # init.from: start from a lab run dir (continued pretraining, selfsup.run.continued: its last weights and
    # architecture settings; in a sweep, sweep:KEY=VALUE names an earlier job) or a transformers checkpoint (a folder
    # or hub name) of a class selfsup-export writes: its architecture settings, tokenizer and weights (a dataclass
    # cannot name a field `from`: a mapping, typos refused)
    init: Dict[str, Optional[str]] = field(default_factory=lambda: {"from": None})
    resume: Optional[str] = None  # a run dir: continue that run (its config, last checkpoint, W&B run)


def per_stack(blocks: int, architecture: str) -> int:
    """Blocks per stack for a depth budget: an encoder-decoder splits it L/2 + L/2 (about the
    parameters of an L-block encoder or decoder, as in the T5 paper's comparisons)."""
    return max(1, blocks // 2) if architecture == ENCODER_DECODER else blocks


def architecture_preset(architecture) -> str:
    """The run's architecture as conf/architecture/ names it: t5 for an encoder-decoder with T5's relative positions
    and RMSNorm (architecture=t5, or a T5 checkpoint's init.from), else architecture.name (the family, which the
    evaluation, report and plots group by)."""
    t5 = architecture.get("positions") == "relative" and architecture.get("norm") == "rmsnorm"
    return "t5" if architecture["name"] == ENCODER_DECODER and t5 else architecture["name"]


def run_dir(resume: Optional[str], fresh: str) -> str:
    """hydra.run.dir: the run being resumed; for a job whose ranks were all started by torchrun or
    srun, outputs/<date>/<job id> (every rank resolves the same dir, so there are no stray dirs);
    else a fresh timestamped dir."""
    if resume:
        return resume
    job = shared_job_id()
    return str(Path(fresh).parent / job) if job else fresh


def output_subdir(resume: Optional[str]) -> str:
    """hydra.output_subdir: a resumed run keeps its original .hydra/ and records the resume beside it."""
    return f"{HYDRA_DIR}/resume-{datetime.now():%Y-%m-%d_%H-%M-%S}" if resume else HYDRA_DIR


def config_dir() -> Path:
    """The config tree: SELFSUP_CONF, else the package's selfsup/conf (in a checkout a link to conf/, whose sweeps/
    group links to sweeps/; an installed wheel holds their files)."""
    if os.environ.get("SELFSUP_CONF"):
        return Path(os.environ["SELFSUP_CONF"])
    return Path(__file__).resolve().parents[1] / "conf"


def group_options(group: str) -> str:
    """`compare, compare_flops, ...`: the options of a config group, read from its folder (selfsup-train --help)."""
    return ", ".join(sorted(p.stem for p in (config_dir() / group).glob("*.yaml")))


def register() -> None:
    for name, fn in (
        ("per_stack", per_stack),
        ("selfsup_run_dir", run_dir),
        ("selfsup_output_subdir", output_subdir),
        ("selfsup_options", group_options),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn, use_cache=True)
    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    # the built-in options' schemas: conf/<group>/<option>.yaml starts from them (typos refused, types checked)
    for name, node in CONFIGS.items():
        store.store(group="schema/objective", name=name, node=node)
    store.store(group="schema/architecture", name="transformer", node=TransformerConfig)
    store.store(group="schema/optim", name="adamw", node=AdamWCosine)
