"""Random-init baselines, computed once: a keyed cache under `<data.cache_dir>/<kind>/<key>`.

An untrained model's scores depend only on its weights (shape, initialisation, seed), its settings and
what it is scored on, so a key hashes exactly those (`untrained_key`); every run of that shape on that
data (a seed sweep, a rerun, every evaluation of one run) reads the entry instead of computing it again.
A damaged entry is computed again and replaced; entries are written under a temporary name and renamed.

`boundary(where)` between the parts of an evaluation and its random-init seeds, `check_stop()` between the batches
of each: a stop signal received by the process (selfsup.reliability.stop) ends the evaluation there
(EvaluationStopped), instead of after all of it. Each boundary is also said as it is passed (report_progress), and a
part under way is said again every HEARTBEAT seconds with the time left of the plan's estimate, so that no
evaluation is silent for more than 30 s.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import torch

from selfsup.reliability import stop

CACHE_VERSION = 2  # raise when a scorer or a model's forward changes what an entry means


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
            why = "it does not fit what it should hold"
        except (OSError, ValueError) as err:
            why = f"{type(err).__name__}: {err}"
        logging.getLogger("selfsup").warning(f"{path}: a damaged random-init cache entry ({why}): computed again")
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


HEARTBEAT = 20.0  # seconds: a part that runs longer is said again this often (a line at least every 30 s)
_place: dict = {"where": "the evaluation", "since": None, "began": None}  # the part under way, since when
_progress: dict = {"to": None, "said": 0.0, "estimate": None}  # estimate: the evaluation's expected seconds


def report_progress(to: Callable[[str], None] | None) -> None:
    """Where an evaluation says each part as it starts, with the time the previous one took (the console's
    lines, selfsup.training.console; None: nowhere): `evaluating: the minimal pairs  (the fixed exam: 3.2 s)`, and at
    its end `evaluated in 41.0 s  (task probe: 12.1 s)`."""
    _progress["to"] = to


def progress_reported() -> bool:
    """Is an evaluation's progress said anywhere (report_progress)?"""
    return _progress["to"] is not None


def planning() -> None:
    """The plan's warm-up begins (said again like a part, should it run long)."""
    _place.update(where="the plan's warm-up", since=time.perf_counter(), began=None)
    _progress["said"] = time.perf_counter()


def say(text: str) -> None:
    """A line where the evaluation's progress goes (nowhere without report_progress)."""
    if _progress["to"] is not None:
        _progress["to"](text)
        _progress["said"] = time.perf_counter()


def _say(text: str) -> None:
    """`text`, with the part before and its seconds once a part was entered."""
    if _place["since"] is not None:
        text += f"  ({_place['where']}: {time.perf_counter() - _place['since']:.1f} s)"
    say(text)


def _still() -> None:
    """The part under way said again, with the time spent in it and in the evaluation, and what is left of
    the plan's estimate: `evaluating: task probe, 0:40 in it; 1:55 of about 4 min, about 2 min left`."""
    now = time.perf_counter()
    text = f"evaluating: {_place['where']}, {_clock(now - (_place['since'] or now))} in it"
    if _place["began"] is not None:
        spent = now - _place["began"]
        text += f"; {_clock(spent)} in all"
        if _progress["estimate"]:
            left = _progress["estimate"] - spent
            text += f" of about {duration(_progress['estimate'])}, " + (
                f"about {duration(left)} left" if left > 0 else "longer than estimated"
            )
    say(text)


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}:{seconds:02d}"


def duration(seconds: float) -> str:
    """30 s, 4 min, 1.5 h."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def evaluation_started(estimate: float | None = None) -> None:
    """An evaluation begins; estimate: its expected seconds (the plan's), for the progress lines' time left."""
    _place.update(where="the evaluation", since=None, began=time.perf_counter())
    _progress["estimate"] = estimate


def evaluation_done(seconds: float) -> None:
    _say(f"evaluated in {seconds:.1f} s")
    _place.update(since=None, began=None)


def boundary(where: str) -> None:
    """Entering the part `where` (a score, a task, a random-init seed): said (report_progress), then go on, or
    end the evaluation here when the process has received a stop signal."""
    _say(f"evaluating: {where}")
    _place.update(where=where, since=time.perf_counter())
    _stop_if_asked()


def check_stop() -> None:
    """Between the batches of a part: go on, or end the evaluation (a part can take a minute on a CPU); a part
    under way for HEARTBEAT seconds since the last line is said again (report_progress)."""
    if _progress["to"] is not None and time.perf_counter() - _progress["said"] >= HEARTBEAT:
        _still()
    _stop_if_asked()


def _stop_if_asked() -> None:
    if stop.received is not None:
        raise EvaluationStopped(stop.received, _place["where"])
