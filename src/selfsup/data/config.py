"""DataConfig: the `data` group's schema (conf/data/), the one place each data setting's default is set."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, List, Optional

# a setting that does not change which text becomes which tokens: not in the resume fingerprint, a resume may change it
SAME_TOKENS = {"fingerprint": False}


@dataclass
class DataConfig:
    source: str = "builtin"  # builtin | text_files | hf_dataset
    paths: List[str] = field(default_factory=list)  # text_files: files or folders
    text_field: str = "text"  # .jsonl / .parquet / hf_dataset column
    hf_name: Optional[str] = None  # hf_dataset: hub name or a builder such as json / parquet
    hf_config: Optional[str] = None
    hf_split: str = "train"
    val_split: Optional[str] = None  # hf_dataset: the data set's own validation split (else val_fraction held out)
    revision: Optional[str] = None  # hf_dataset: a hub revision (branch, tag or commit)
    data_files: Optional[List[str]] = None
    streaming: bool = False
    max_documents: Optional[int] = None
    vocab_size: int = 4096  # byte-level BPE trained on (a sample of) the training split
    tokenizer: Optional[str] = None  # a pretrained tokenizer.json or hub name instead of BPE (vocab_size: its own)
    n_sentinels: int = 100  # <extra_id_N> tokens for span corruption
    fim_tokens: bool = True  # the tokenizer holds <fim_prefix> <fim_middle> <fim_suffix> (false: the layout before
    #                          them, which resume=RUN_DIR keeps for a run made before them)
    val_fraction: float = 0.05  # documents held out for validation
    seq_len: int = 128  # model input length
    batch_size: int = field(default=16, metadata=SAME_TOKENS)  # per device, per micro-batch
    num_workers: int = field(default=0, metadata=SAME_TOKENS)
    cache_dir: str = field(default=".cache/selfsup", metadata=SAME_TOKENS)
    tokenizer_sample_chars: Optional[int] = 100_000_000  # BPE trains on this many characters of training text
    num_proc: Optional[int] = field(
        default=None, metadata=SAME_TOKENS
    )  # tokenizing processes (null: one per core, up to 8)
    shard_chars: int = field(default=64_000_000, metadata=SAME_TOKENS)  # characters of text per token shard
    # the cache key of local data files: stat (paths, sizes, modification times: an edit that keeps both reuses a
    # stale cache) | full (hash every file's bytes: a full read each start)
    verify: str = field(default="stat", metadata=SAME_TOKENS)


@dataclass(frozen=True)
class TextSource:
    """Where a text is read from: the one spec that pretraining data (Corpus, from data.*), held-out text
    (eval.heldout.*), pair sets (eval.pairs.sets.*), tasks (eval.tasks.*) and generation jobs (eval.generation.*) are
    read through. Each builds it from the settings its users name; the splits and fields it reads stay its own."""

    source: str = "builtin"  # builtin | text_files | hf_dataset
    paths: tuple = ()  # text_files: .txt / .jsonl / .csv / .parquet files or folders
    hf_name: Optional[str] = None  # hf_dataset: a data set's name or local folder, or a builder such as json
    hf_config: Optional[str] = None
    data_files: Any = None  # hf_dataset: local files for a builder

    @classmethod
    def of(cls, source: str, paths, hf_name: str | None, hf_config: str | None, data_files) -> TextSource:
        return cls(source, tuple(paths or ()), hf_name, hf_config, data_files)


TEXT_SOURCE = tuple(f.name for f in fields(TextSource))  # the data group's settings that are its TextSource


def fingerprinted(config: type) -> tuple[str, ...]:
    """The settings of a config dataclass a resume may not change: all but those whose field says
    `metadata={"fingerprint": False}` (DataConfig's SAME_TOKENS, TransformerConfig.activation_checkpointing)."""
    return tuple(f.name for f in fields(config) if f.metadata.get("fingerprint", True))
