"""Secrets out of configs and tags, and a memory probe."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

# ============================================================================ secrets

_SECRET_WORDS = {"key", "apikey", "token", "secret", "secrets", "password", "passwd", "credential", "credentials"}
_SPECIAL_TOKEN = re.compile(r"<[^<>\s]{1,32}>|\[[A-Za-z_]{1,20}\]")  # pad_token: "<pad>", "[MASK]"
_SECRET_TEXT = re.compile(
    r"(?<![0-9A-Za-z])[0-9a-fA-F]{40}(?![0-9A-Za-z])"  # W&B API key
    r"|(?<![0-9A-Za-z])hf_[A-Za-z0-9]{20,}"
)  # Hugging Face token
_URL_PASSWORD = re.compile(r"(://[^/\s:@]+:)[^/\s@]+@")  # scheme://user:pass@host
_MIN_SECRET = 8  # shorter values are not looked for inside other strings (they would match everywhere)
_registered: set[str] = set()


def _secret_key(key: Any) -> bool:
    """A setting or variable whose name has a word such as key, token, secret or password in it."""
    return isinstance(key, str) and any(w in _SECRET_WORDS for w in re.split(r"[^a-z]+", key.lower()))


def _secret_value(value: Any) -> bool:
    return isinstance(value, str) and len(value) >= _MIN_SECRET and not _SPECIAL_TOKEN.fullmatch(value)


def register_secrets(config: Any = None, environ: Mapping[str, str] | None = None) -> None:
    """Remember the values of secret settings (in a nested config) and secret environment variables
    (WANDB_API_KEY, HF_TOKEN, ...), so that `redact` removes them from every string, wherever they appear:
    a run name, a tag, a recorded command line."""
    environ = os.environ if environ is None else environ
    _registered.update(v for k, v in environ.items() if _secret_key(k) and _secret_value(v))

    def walk(tree: Any, secret: bool = False) -> None:
        if isinstance(tree, Mapping):
            for key, value in tree.items():
                walk(value, secret or _secret_key(key))
        elif isinstance(tree, (list, tuple)):
            for value in tree:
                walk(value, secret)
        elif secret and _secret_value(tree):
            _registered.add(tree)

    walk(config)


def redact(obj: Any, _secret: bool = False) -> Any:
    """A copy of a nested config (mappings, lists, tuples) with secrets replaced by "***".

    Redacted: every non-empty string under a key with a word such as key, apikey, token, secret,
    password or credential in its name (case-insensitive; "api_key", "hf_token", "wandb-secret"), except
    special tokens such as "<pad>" or "[MASK]" (a tokenizer's pad_token is no secret); numbers, bools and
    None stay. In every other string: the values `register_secrets` and the environment's secret
    variables hold, 40-hex-character W&B API keys, hf_... tokens and URL passwords.
    Mappings come back as dicts, tuples as tuples, other sequences as lists.
    """
    if isinstance(obj, Mapping):
        return {key: redact(value, _secret or _secret_key(key)) for key, value in obj.items()}
    if isinstance(obj, str):
        if _secret and obj and not _SPECIAL_TOKEN.fullmatch(obj):
            return "***"
        known = _registered | {v for k, v in os.environ.items() if _secret_key(k) and _secret_value(v)}
        for value in sorted(known, key=len, reverse=True):
            obj = obj.replace(value, "***")
        return _URL_PASSWORD.sub(r"\1***@", _SECRET_TEXT.sub("***", obj))
    if isinstance(obj, tuple):
        return tuple(redact(v, _secret) for v in obj)
    if isinstance(obj, Sequence) and not isinstance(obj, (bytes, bytearray)):
        return [redact(v, _secret) for v in obj]
    return obj


def redact_files(paths) -> None:
    """Rewrite each file that exists with its secrets redacted (`redact` of its text): Hydra's records of a run
    (.hydra/config.yaml, overrides.yaml, hydra.yaml, a sweep's multirun.yaml) hold the command line as given."""
    from pathlib import Path

    for path in map(Path, paths):
        try:
            text = path.read_text()
            cleaned = redact(text)
            if cleaned != text:
                tmp = path.with_name(f".{path.name}.tmp")
                tmp.write_text(cleaned)
                os.replace(tmp, path)
        except OSError:
            continue
