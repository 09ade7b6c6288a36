"""The `eval` group's schema (conf/eval/): the one place each evaluation setting's default is set, as
selfsup.data.config is the data group's; Hydra checks every eval.* key and type against it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from selfsup.evaluation.fixed import MASK_RATES, SPAN_LENGTHS, SPAN_RATES
from selfsup.evaluation.pair_sets import MAX_PAIRS, MAX_WORDS
from selfsup.evaluation.probe import Finetune
from selfsup.evaluation.scoring import BATCH_TOKENS


@dataclass
class ProbeConfig:
    protocol: str = "linear"  # a task's protocol unless it names its own (eval.tasks.NAME.protocol): linear (frozen
    #                           features) | finetune (a copy of the model fine-tuned, eval.finetune)
    max_length: int = 64  # linear: tokens per example (longer ones cut longest-first)
    l2: Optional[float] = None  # linear: L2 penalty of the classifier (null: chosen on held-out training examples)
    seed: int = 0  # the fine-tuning seeds' stream and the random-init baselines' weights
    random_init_seeds: int = 2  # untrained models of the run's shape probed (fine-tuned) the same way (cached)


@dataclass
class FinetuneConfig:
    """The finetune protocol (selfsup.evaluation.Finetune): a copy of the model plus a linear head on a state of the
    example (pooling: auto, each family's measured better one; hf, transformers' *ForSequenceClassification's;
    mean), AdamW for `steps` steps, or for `epochs` passes over the task's training examples within
    [min_steps, max_steps]."""

    _target_: str = "selfsup.evaluation.Finetune"
    steps: Optional[int] = Finetune.steps  # AdamW steps; null: epochs passes over the task's training examples,
    epochs: float = Finetune.epochs  # at least min_steps and at most max_steps (the plan says each task's count)
    min_steps: int = Finetune.min_steps
    max_steps: int = Finetune.max_steps
    lr: float = Finetune.lr
    batch_size: int = Finetune.batch_size
    warmup: float = Finetune.warmup  # fraction of the steps of linear warmup, then cosine decay to 0
    weight_decay: float = Finetune.weight_decay
    max_length: int = Finetune.max_length  # tokens per example, specials included (a pair cut longest-first)
    seeds: int = Finetune.seeds  # fine-tuning seeds of the trained model (their spread is in the margin's interval)
    pooling: str = Finetune.pooling  # auto (per family: probe.AUTO_POOLING) | hf (*ForSequenceClassification's) | mean


@dataclass
class FixedExamConfig:
    """eval/fixed/...: every run of a family scored on one panel of exams (selfsup.evaluation.fixed): encoder:
    MLM (80/10/10) at each of mask_rates; encoder_decoder: span corruption at each of span_rates with mean span 3,
    and at each of span_lengths with noise density 0.15; decoder: CLM. eval/fixed/loss is the mean of the
    members' losses. Rates in (0, 1), spans >= 1, no list empty."""

    max_tokens: Optional[int] = 131072  # validation tokens the whole exam reads, shared evenly by its members
    #                                     (each from the split's start; null: all, for each member)
    mask_rates: List[float] = field(default_factory=lambda: list(MASK_RATES))  # encoder: members rate_<%>
    span_rates: List[float] = field(default_factory=lambda: list(SPAN_RATES))  # encoder_decoder, span 3
    span_lengths: List[float] = field(default_factory=lambda: list(SPAN_LENGTHS))  # encoder_decoder, rate 0.15
    #                                     (members rate_<%>_span_<length>, e.g. rate_15_span_3)


@dataclass
class PairsConfig:
    """eval/pairs/...: zero-shot minimal pairs (selfsup.evaluation.pairs.MinimalPairs)."""

    _target_: str = "selfsup.evaluation.MinimalPairs"
    builtin: bool = True  # the built-in set from held-out sentences: eval/pairs/accuracy
    types: List[str] = field(default_factory=lambda: ["swap_1", "replaced_1", "replaced_4"])
    max_pairs: int = MAX_PAIRS  # per built-in type
    max_words: int = MAX_WORDS  # built-in sentences of at most this many words
    # eval/pairs/<name>/...: your sets in BLiMP's layout, each the keyword arguments of
    # selfsup.evaluation.PairSource: source text_files (paths) | hf_dataset (hf_name, hf_config, split),
    # good_field, bad_field, group_field, max_pairs
    sets: Dict[str, Any] = field(default_factory=dict)
    random_init_seeds: int = 3  # untrained models of the run's shape scored the same way (cached)
    denoise: bool = True  # encoder-decoders: also the span pseudo-log-likelihood, eval/pairs/denoise/...
    batch_tokens: int = BATCH_TOKENS  # token positions per forward (rows x longest row)
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
    batch_tokens: int = BATCH_TOKENS  # token positions per forward (rows x longest row)


@dataclass
class InfillingConfig(HeldoutConfig):
    """eval/infilling/...: decoders write a held-out text's middle between its prefix and suffix, zero-shot, in the
    layout they were trained with (selfsup.evaluation.infilling.Infilling); the text is read as eval.heldout's."""

    _target_: str = "selfsup.evaluation.Infilling"
    max_bytes: int = 131072  # UTF-8 bytes read, documents in order
    max_examples: int = 200  # one example a document (its first max_words words), in order
    max_words: int = 24
    middle_words: int = 3  # a middle holds 1 to middle_words words
    fim_layout: str = (
        "psm"  # how a FIM run reads an example: psm (prefix, suffix, middle) | spm (suffix, prefix, middle)
    )


@dataclass
class EvalConfig:
    _target_: str = "selfsup.evaluation.Evaluation"
    _convert_: str = "all"
    fixed: Optional[FixedExamConfig] = field(default_factory=FixedExamConfig)  # eval/fixed/loss (null: none)
    pairs: Optional[PairsConfig] = field(default_factory=PairsConfig)  # eval/pairs/... (null: none)
    heldout: Optional[HeldoutConfig] = field(default_factory=HeldoutConfig)  # eval/heldout/... (null: none)
    infilling: Optional[InfillingConfig] = field(default_factory=InfillingConfig)  # eval/infilling/... (null: none)
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
