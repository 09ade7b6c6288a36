"""W&B settings shared by selfsup-train and selfsup-report: is an API key configured, which mode to run in.
selfsup-train's loggers are in selfsup.run.loggers."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse


def api_key_configured() -> bool:
    """A W&B API key is set: WANDB_API_KEY, or a netrc entry for the W&B host (WANDB_BASE_URL, default api.wandb.ai)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    return netrc.is_file() and host in netrc.read_text(errors="ignore")


def wandb_mode(requested: str) -> str:
    """auto: offline unless the user configured W&B (WANDB_MODE, or an API key); never a prompt."""
    if requested != "auto":
        return requested
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if api_key_configured() else "offline"
