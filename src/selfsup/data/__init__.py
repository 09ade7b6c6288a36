"""Data layer: text sources → byte-level BPE tokenizer + token cache → fixed-length windows (Corpus);
selfsup.data.datamodule adds Lightning's data module around a Corpus."""

from selfsup.data.builtin import builtin_documents
from selfsup.data.cache import FORMAT_VERSION, DocumentKeys, ShardedTokens, TokenCache, cache_key
from selfsup.data.corpus import SOURCES, Corpus, TokenWindows
from selfsup.data.prepare import build_or_load_cache
from selfsup.data.sources import (
    DataError,
    document_bucket,
    split_documents,
    text_file_documents,
)
from selfsup.data.tokenizer import (
    encode_documents,
    load_tokenizer,
    min_vocab_size,
    train_tokenizer,
    vocab_from_tokenizer,
)
from selfsup.data.vocab import WORD_START_MARKER, Vocab, special_tokens

__all__ = [
    "FORMAT_VERSION",
    "Corpus",
    "SOURCES",
    "WORD_START_MARKER",
    "DataError",
    "DocumentKeys",
    "ShardedTokens",
    "encode_documents",
    "TokenCache",
    "TokenWindows",
    "Vocab",
    "build_or_load_cache",
    "builtin_documents",
    "cache_key",
    "document_bucket",
    "load_tokenizer",
    "min_vocab_size",
    "special_tokens",
    "split_documents",
    "text_file_documents",
    "train_tokenizer",
    "vocab_from_tokenizer",
]
