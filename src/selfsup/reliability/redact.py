"""Secrets out of configs and tags, and a memory probe."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

# ============================================================================ secrets

_SECRET_KEY = re.compile(r"(?:^|_)(?:api_?key|token|secret|password|passwd)$|_key$|_token$", re.IGNORECASE)
_SPECIAL_TOKEN = re.compile(r"<[^<>\s]{1,32}>|\[[A-Za-z_]{1,20}\]")  # pad_token: "<pad>", "[MASK]"
_SECRET_TEXT = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{40}(?![0-9A-Za-z])"   # W&B API key
                          r"|(?<![0-9A-Za-z])hf_[A-Za-z0-9]{20,}")             # Hugging Face token
_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^/\s@]+@")                         # scheme://user:pass@host


def _secret_key(key: Any) -> bool:
    return isinstance(key, str) and bool(_SECRET_KEY.search(key.replace("-", "_")))


def redact(obj: Any, _secret: bool = False) -> Any:
    """A copy of a nested config (mappings, lists, tuples) with secrets replaced by "***".

    Redacted: every non-empty string under a key named api_key, apikey, token, secret, password,
    passwd or ending in _key / _token (case-insensitive, "-" same as "_"), except special tokens such
    as "<pad>" or "[MASK]" (a tokenizer's pad_token is no secret); numbers, bools and None stay.
    In every other string: 40-hex-character W&B API keys, hf_... tokens and URL passwords.
    Mappings come back as dicts, tuples as tuples, other sequences as lists.
    """
    if isinstance(obj, Mapping):
        return {key: redact(value, _secret or _secret_key(key)) for key, value in obj.items()}
    if isinstance(obj, str):
        if _secret and obj and not _SPECIAL_TOKEN.fullmatch(obj):
            return "***"
        return _URL_PASSWORD.sub(r"\1***@", _SECRET_TEXT.sub("***", obj))
    if isinstance(obj, tuple):
        return tuple(redact(v, _secret) for v in obj)
    if isinstance(obj, Sequence) and not isinstance(obj, (bytes, bytearray)):
        return [redact(v, _secret) for v in obj]
    return obj


# ============================================================================ memory


def rss_mb() -> float:
    """Resident memory of this process now, in MiB (/proc/self/statm; elsewhere the peak, from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            resident_pages = int(f.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource
        import sys
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024
