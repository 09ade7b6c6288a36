"""This process's memory: resident now, and the peak (its own, or its largest child's), in MiB."""

from __future__ import annotations

import os
import resource
import sys


def peak_rss_mb(children: bool = False) -> float:
    """The peak resident memory of this process (children: of its largest finished child), from getrusage."""
    peak = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # macOS: bytes; Linux: kilobytes


def rss_mb() -> float:
    """Resident memory of this process now (/proc/self/statm; elsewhere the peak)."""
    try:
        with open("/proc/self/statm") as f:
            resident_pages = int(f.read().split()[1])
        return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return peak_rss_mb()
