"""Random-init baselines, computed once: a keyed cache under `<data.cache_dir>/<kind>/<key>`.

An untrained model's scores depend only on its weights (shape, initialisation, seed), its settings and
what it is scored on, so a key hashes exactly those (`untrained_key`); every run of that shape on that
data (a seed sweep, a rerun, every evaluation of one run) reads the entry instead of computing it again.
A damaged entry is computed again and replaced; entries are written under a temporary name and renamed.

`boundary(where)` between the parts of an evaluation and its random-init seeds, `check_stop()` between the batches
of each: a stop signal received by the process (selfsup.reliability.stop) ends the evaluation there
(EvaluationStopped), instead of after all of it. Each boundary is also said as it is passed (report_progress), so
that a minute-long evaluation is not silent.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import torch

from selfsup.reliability import stop

CACHE_VERSION = 1  # raise when a scorer or a model's forward changes what an entry means


def untrained_key(model: torch.nn.Module, **what: Any) -> str:
    """A hash of the model's weights, class and settings and of `what` it is scored on (json-able values)."""
    digest = hashlib.sha256()
    config = asdict(model.config) if is_dataclass(getattr(model, "config", None)) else {}
    digest.update(
        json.dumps(
            {"version": CACHE_VERSION, "class": type(model).__name__, "config": config, **what},
            sort_keys=True,
            default=str,
        ).encode()
    )
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:32]


def cached(
    path: Path | None, compute: Callable[[], Any], read: Callable[[Path], Any], write: Callable[[Any, Any], None]
) -> Any:
    """read(path) when it gives a value (not None, no error), else compute() and write(value, file) to path
    atomically. path None: compute() alone."""
    if path is not None and path.is_file():
        try:
            value = read(path)
            if value is not None:
                return value
        except (OSError, ValueError):
            pass  # a damaged entry: computed again and replaced
    value = compute()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(scratch, "wb") as f:
            write(value, f)
        os.replace(scratch, path)
    return value


class EvaluationStopped(Exception):
    """A stop signal arrived during an evaluation: it ended at a boundary (args: the signal, where)."""


_place: dict = {"where": "the evaluation", "since": None}  # the part under way (the last boundary passed)
_progress: dict = {"to": None}


def report_progress(to: Callable[[str], None] | None) -> None:
    """Where an evaluation says each part as it starts, with the time the previous one took (the console's
    lines, selfsup.training.console; None: nowhere): `evaluating: the minimal pairs  (the fixed exam: 3.2 s)`, and at
    its end `evaluated in 41.0 s  (task probe: 12.1 s)`."""
    _progress["to"] = to


def _say(text: str) -> None:
    if _progress["to"] is not None:
        if _place["since"] is not None:
            text += f"  ({_place['where']}: {time.perf_counter() - _place['since']:.1f} s)"
        _progress["to"](text)


def evaluation_started() -> None:
    _place.update(where="the evaluation", since=None)


def evaluation_done(seconds: float) -> None:
    _say(f"evaluated in {seconds:.1f} s")
    _place["since"] = None


def boundary(where: str) -> None:
    """Entering the part `where` (a score, a task, a random-init seed): said (report_progress), then go on, or
    end the evaluation here when the process has received a stop signal."""
    _say(f"evaluating: {where}")
    _place.update(where=where, since=time.perf_counter())
    check_stop()


def check_stop() -> None:
    """Between the batches of a part: go on, or end the evaluation (a part can take a minute on a CPU)."""
    if stop.received is not None:
        raise EvaluationStopped(stop.received, _place["where"])
