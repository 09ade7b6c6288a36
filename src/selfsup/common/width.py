"""The console's width: no line the lab prints is wider than WIDTH columns (its tables: 160,
selfsup.results.summary). Light to import: Hydra's logging set-up loads it (conf/train.yaml), before the run
imports Lightning, whose own logger then stays as the run sets it."""

from __future__ import annotations

import logging
import textwrap

WIDTH = 100


class Wrapped(logging.Formatter):
    """Hydra's own log lines (a sweep's `#0 : objective=mlm data.cache_dir=...`, one per job) wrapped at WIDTH
    columns, the rest indented (conf/train.yaml: hydra.hydra_logging)."""

    def __init__(self, format: str, datefmt: str | None = None):  # noqa: A002 - logging.config passes `format`
        super().__init__(format, datefmt)

    def format(self, record: logging.LogRecord) -> str:
        lines = super().format(record).splitlines()
        return "\n".join(
            out
            for line in lines
            for out in (
                textwrap.wrap(line, WIDTH, subsequent_indent="    ", break_on_hyphens=False)
                if len(line.expandtabs()) > WIDTH
                else [line]
            )
        )
