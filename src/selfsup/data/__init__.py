"""Data layer: text sources → byte-level BPE tokenizer + token cache → fixed-length windows."""

from selfsup.data.builtin import builtin_documents
from selfsup.data.corpus import SOURCES, Corpus, TokenWindows
from selfsup.data.sources import (
    DataError,
    document_bucket,
    hf_documents,
    split_documents,
    text_file_documents,
)
from selfsup.data.tokenizer import (
    FORMAT_VERSION,
    TokenCache,
    build_or_load_cache,
    cache_key,
    load_tokenizer,
    min_vocab_size,
    train_tokenizer,
    vocab_from_tokenizer,
)
from selfsup.data.vocab import WORD_START_MARKER, Vocab, special_tokens


def __getattr__(name: str):
    """The data module imports Lightning (seconds); load it only when asked for, so that the
    config and data checks (selfsup.data.corpus) run before it and stay fast."""
    if name in ("SelfSupDataModule", "ShardedSampler"):
        from selfsup.data import datamodule
        return getattr(datamodule, name)
    raise AttributeError(f"module 'selfsup.data' has no attribute {name!r}")


__all__ = [
    "FORMAT_VERSION",
    "Corpus",
    "SOURCES",
    "WORD_START_MARKER",
    "DataError",
    "SelfSupDataModule",
    "TokenCache",
    "TokenWindows",
    "Vocab",
    "build_or_load_cache",
    "builtin_documents",
    "cache_key",
    "document_bucket",
    "hf_documents",
    "load_tokenizer",
    "min_vocab_size",
    "special_tokens",
    "split_documents",
    "text_file_documents",
    "train_tokenizer",
    "vocab_from_tokenizer",
]
