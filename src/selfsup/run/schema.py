"""Structured configs: the schema Hydra checks every key and type against.

Each setting's default is set here once (the data group's in selfsup.data.config, each objective's, the
architecture's and the optimizer's in their own classes); the YAML files under conf/ set only what their
choice is about, one swappable thing per file. A typo'd key or a value of the wrong type is refused by Hydra
with the key's full name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from selfsup.data.config import DataConfig
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
class ProbeConfig:
    protocol: str = "linear"  # a task's protocol unless it names its own (eval.tasks.NAME.protocol): linear (frozen
    #                           features) | finetune (a copy of the model fine-tuned, eval.finetune)
    max_length: int = 64  # linear: tokens per example (longer ones cut longest-first)
    l2: Optional[float] = None  # linear: L2 penalty of the classifier (null: chosen on held-out training examples)
    seed: int = 0  # the fine-tuning seeds' stream and the random-init baselines' weights
    random_init_seeds: int = 3  # untrained models of the run's shape probed (fine-tuned) the same way (cached)


@dataclass
class FinetuneConfig:
    """The finetune protocol (selfsup.evaluation.Finetune): a copy of the model plus a linear head on a state of the
    example (pooling: auto, each family's measured better one; hf, transformers' *ForSequenceClassification's;
    mean), AdamW for `steps` steps."""

    _target_: str = "selfsup.evaluation.Finetune"
    steps: int = 300
    lr: float = 1e-3
    batch_size: int = 32
    warmup: float = 0.1  # fraction of the steps of linear warmup, then cosine decay to 0
    weight_decay: float = 0.01
    max_length: int = 128  # tokens per example, specials included (a pair cut longest-first)
    seeds: int = 3  # fine-tuning seeds of the trained model (their spread is in the margin's interval)
    pooling: str = "auto"  # auto (per family: probe.AUTO_POOLING) | hf (*ForSequenceClassification's) | mean


@dataclass
class FixedExamConfig:
    """eval/fixed/...: every run of a family scored on one panel of exams (selfsup.evaluation.fixed): encoder:
    MLM (80/10/10) at each of mask_rates; encoder_decoder: span corruption at each of span_rates with mean span 3,
    and at each of span_lengths with noise density 0.15; decoder: CLM. eval/fixed/loss is the mean of the
    members' losses. Rates in (0, 1), spans >= 1, no list empty."""

    max_tokens: Optional[int] = 131072  # validation tokens the whole exam reads, shared evenly by its members
    #                                     (each from the split's start; null: all, for each member)
    mask_rates: List[float] = field(default_factory=lambda: [0.10, 0.15, 0.25, 0.40])  # encoder: members rate_<%>
    span_rates: List[float] = field(default_factory=lambda: [0.10, 0.15, 0.25, 0.50])  # encoder_decoder, span 3
    span_lengths: List[float] = field(default_factory=lambda: [2.0, 3.0, 5.0, 10.0])  # encoder_decoder, rate 0.15
    #                                     (members rate_<%>_span_<length>, e.g. rate_15_span_3)


@dataclass
class PairsConfig:
    """eval/pairs/...: zero-shot minimal pairs (selfsup.evaluation.pairs.MinimalPairs)."""

    _target_: str = "selfsup.evaluation.MinimalPairs"
    builtin: bool = True  # the built-in set from held-out sentences: eval/pairs/accuracy
    types: List[str] = field(default_factory=lambda: ["swap_1", "replaced_1", "replaced_4"])
    max_pairs: int = 1000  # per built-in type
    max_words: int = 12  # built-in sentences of at most this many words
    # eval/pairs/<name>/...: your sets in BLiMP's layout, each the keyword arguments of
    # selfsup.evaluation.PairSource: source text_files (paths) | hf_dataset (hf_name, hf_config, split),
    # good_field, bad_field, group_field, max_pairs
    sets: Dict[str, Any] = field(default_factory=dict)
    random_init_seeds: int = 3  # untrained models of the run's shape scored the same way (cached)
    denoise: bool = True  # encoder-decoders: also the span pseudo-log-likelihood, eval/pairs/denoise/...
    batch_tokens: int = 16384  # token positions per forward
    reference_tokens: int = 10000000  # training tokens the unigram / bigram references count


@dataclass
class HeldoutConfig:
    """eval/heldout/...: a fixed text scored by the family's scorer in bits per UTF-8 byte
    (selfsup.evaluation.heldout.HeldoutText)."""

    _target_: str = "selfsup.evaluation.HeldoutText"
    source: str = "builtin"  # builtin (held-out stdlib docstrings, never pretrained on) | text_files | hf_dataset
    paths: List[str] = field(default_factory=list)  # text_files: .txt / .jsonl / .parquet files or folders
    text_field: str = "text"  # .jsonl / .parquet / hf_dataset: the column that holds the text
    hf_name: Optional[str] = None  # hf_dataset: a data set's name or local folder
    hf_config: Optional[str] = None
    split: str = "validation"
    data_files: Optional[Any] = None  # hf_dataset: local files for a builder such as hf_name=json
    max_bytes: int = 16384  # UTF-8 bytes read, documents in order (the last one cut)
    batch_tokens: int = 16384  # token positions per forward


@dataclass
class EvalConfig:
    _target_: str = "selfsup.evaluation.Evaluation"
    _convert_: str = "all"
    fixed: Optional[FixedExamConfig] = field(default_factory=FixedExamConfig)  # eval/fixed/loss (null: none)
    pairs: Optional[PairsConfig] = field(default_factory=PairsConfig)  # eval/pairs/... (null: none)
    heldout: Optional[HeldoutConfig] = field(default_factory=HeldoutConfig)  # eval/heldout/... (null: none)
    every_n_validations: int = 0  # also evaluate at every k-th validation (0: after training only)
    probe: ProbeConfig = field(default_factory=ProbeConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)  # the finetune protocol's settings
    # eval/<name>/...: the probe's tasks, each the keyword arguments of selfsup.evaluation.Task (or of the
    # class its _target_ names): source builtin | text_files | hf_dataset, paths, text_field or text_fields (a
    # sentence pair), label_field, protocol (linear | finetune), ...
    tasks: Optional[Dict[str, Any]] = field(default_factory=dict)  # (null: none)
    # eval/<name>/loss, exact_match, token_f1: generation jobs, each the keyword arguments of
    # selfsup.evaluation.GenerationJob: source builtin (job continuation | docstring_name) | text_files | hf_dataset,
    # paths, source_field, target_field, max_new_tokens, ...; fine-tuned with eval.finetune's settings
    generation: Optional[Dict[str, Any]] = field(default_factory=dict)  # (null: none)


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
    # init.from: start from a transformers checkpoint (a folder or hub name) of a class selfsup-export writes: its
    # architecture settings, tokenizer and weights (a dataclass cannot name a field `from`: a mapping, typos refused)
    init: Dict[str, Optional[str]] = field(default_factory=lambda: {"from": None})
    resume: Optional[str] = None  # a run dir: continue that run (its config, last checkpoint, W&B run)


def per_stack(blocks: int, architecture: str) -> int:
    """Blocks per stack for a depth budget: an encoder-decoder splits it L/2 + L/2 (about the
    parameters of an L-block encoder or decoder, as in the T5 paper's comparisons)."""
    return max(1, blocks // 2) if architecture == "encoder_decoder" else blocks


def architecture_preset(architecture) -> str:
    """The run's architecture as conf/architecture/ names it: t5 for an encoder-decoder with T5's relative positions
    and RMSNorm (architecture=t5, or a T5 checkpoint's init.from), else architecture.name (the family, which the
    evaluation, report and plots group by)."""
    t5 = architecture.get("positions") == "relative" and architecture.get("norm") == "rmsnorm"
    return "t5" if architecture["name"] == "encoder_decoder" and t5 else architecture["name"]


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
    return f".hydra/resume-{datetime.now():%Y-%m-%d_%H-%M-%S}" if resume else ".hydra"


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
