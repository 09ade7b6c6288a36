"""Which code a run ran: the package version and, from a git checkout, the commit (and whether the
working tree had changes). Kept in summary.json, the W&B config and a W&B run file."""

from __future__ import annotations

import functools
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


@functools.cache
def code_version() -> dict:
    try:
        package = version("selfsup")
    except PackageNotFoundError:
        package = None
    source = Path(__file__).resolve().parents[3]
    commit = dirty = None
    try:
        done = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        if done.returncode == 0:
            commit = done.stdout.strip()
            status = subprocess.run(
                ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"version": package, "git_commit": commit, "git_dirty": dirty}


def describe(code: dict | None) -> str:
    """One line: `selfsup 0.1.0, git 1a2b3c4d (with changes)`."""
    if not code:
        return "unknown"
    parts = [f"selfsup {code.get('version') or '?'}"]
    if code.get("git_commit"):
        parts.append(
            f"git {code['git_commit'][:10]}" + (" (with uncommitted changes)" if code.get("git_dirty") else "")
        )
    return ", ".join(parts)
