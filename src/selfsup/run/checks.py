"""The checks of the settings' values, and Hydra's config errors as one line.

A mistake the user can fix is a UserError (selfsup.errors): reported as one line, exit 2, no traceback.
Hydra's and OmegaConf's own config errors are folded into one line too (config_error_line).
"""

from __future__ import annotations

import math
import os
import re
import traceback

import torch
from omegaconf import DictConfig, OmegaConf

from selfsup.common.names import override_key
from selfsup.errors import UserError

PRECISIONS = ("32-true", "32", "16-mixed", "16", "bf16-mixed", "bf16", "16-true", "bf16-true", "64-true", "64")
ACCELERATORS = ("cpu", "gpu", "cuda", "mps", "auto")


def non_finite(tree, prefix: str = ""):
    """(dotted key, value) of the first NaN or infinite number in a nested config, or None."""
    if isinstance(tree, dict):
        items = tree.items()
    elif isinstance(tree, list):
        items = ((f"[{i}]", v) for i, v in enumerate(tree))
    else:
        return (prefix, tree) if isinstance(tree, float) and not math.isfinite(tree) else None
    for key, value in items:
        found = non_finite(value, f"{prefix}{key}" if str(key).startswith("[") or not prefix else f"{prefix}.{key}")
        if found:
            return found
    return None


def check_overrides(overrides: list[str], cfg: DictConfig) -> None:
    """A command line's key={} over a mapping that has entries leaves them all (Hydra merges a mapping into a
    mapping), which is never what was meant: refused in one line naming what removes them."""
    for override in overrides:
        key = override_key(override)
        if override.partition("=")[2].replace(" ", "") == "{}":
            node = OmegaConf.select(cfg, key, default=None)
            if isinstance(node, DictConfig) and len(node):
                raise UserError(
                    f"{override} keeps {key}'s entries ({', '.join(map(str, node))}): Hydra merges a mapping into a "
                    f"mapping; use {key}=null for none, or ~{key}.NAME to drop one"
                )


def check_values(cfg: DictConfig) -> None:
    """Values of the right type but out of range: one line here, not a traceback from deep in a build."""
    found = non_finite(OmegaConf.to_container(cfg, resolve=True))
    if found:
        raise UserError(
            f"{found[0]}={found[1]} is not a finite number: set a number (or null where the setting allows it)"
        )
    t, o = cfg.trainer, cfg.optim
    at_least_one = [
        ("trainer.max_steps", t.max_steps),
        ("trainer.val_check_interval", t.val_check_interval),
        ("trainer.log_every_n_steps", t.log_every_n_steps),
        ("trainer.accumulate", t.accumulate),
    ]
    for key, value in at_least_one:
        if value is not None and value < 1:
            raise UserError(f"{key}={value} must be at least 1")
    if "lr" in o and not o.lr > 0:
        raise UserError(f"optim.lr={o.lr} must be positive (the lab's default is 1e-3)")
    for key in ("warmup_steps", "weight_decay", "grad_clip", "min_lr_ratio"):
        if o.get(key) is not None and o[key] < 0:
            raise UserError(f"optim.{key}={o[key]} is negative: use 0 or more")
    if str(t.precision) not in PRECISIONS:
        raise UserError(f"trainer.precision={t.precision} is unknown: use one of {', '.join(PRECISIONS[::2])}")
    if t.accelerator not in ACCELERATORS:
        raise UserError(f"trainer.accelerator={t.accelerator} is not supported: use one of {', '.join(ACCELERATORS)}")


def check_devices(cfg: DictConfig) -> None:
    """One clear line instead of Lightning's traceback when the trainer asks for GPUs that are not there."""
    t = cfg.trainer
    if t.accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise UserError(
            f"trainer.accelerator={t.accelerator} but this machine has no usable GPU "
            f"(torch.cuda.is_available() is False): use trainer=cpu or trainer=ddp_cpu, "
            f"or install a CUDA build of torch"
        )


def null_part(err: BaseException, overrides: list[str], composed=None) -> str | None:
    """One line for a setting put inside a part of the config that is null (`eval=none eval.heldout.max_bytes=100`,
    `eval.heldout={max_bytes: 100}`): Hydra cannot merge into a null node, and OmegaConf raises a bare
    AttributeError or AssertionError naming NoneType. None for any other error. composed(choices): the config
    that the command's group choices (`eval=none`) compose, in which the setting's part is looked up."""
    if not isinstance(err, (AttributeError, AssertionError)) or "NoneType" not in str(err):
        return None
    frames = traceback.extract_tb(err.__traceback__)
    if not any(f"{os.sep}omegaconf{os.sep}" in frame.filename for frame in frames):
        return None
    keyed = [o for o in overrides if "=" in o and not o.startswith("~") and "." in override_key(o)]
    keyed = [o for o in keyed if not override_key(o).startswith("hydra.")] or keyed
    named = re.search(r"full_key: ([\w.]+)", str(err))
    parts = {o: null_parent(o, composed, overrides) for o in keyed} if composed and not named else {}
    found = next(((o, part) for o, part in parts.items() if part), None)
    if named:
        key = named[1]
        culprit = next((o for o in keyed if override_key(o).startswith(key)), keyed[-1] if keyed else "a setting")
        part = key
    elif found:
        culprit, part = found
    else:
        culprit = keyed[-1] if keyed else "a setting"
        part = override_key(culprit).rpartition(".")[0]
    return (
        f"{culprit}: {part} is null (off) in this config, and a setting cannot be put inside a null part: start from "
        f"a config option where it is on (e.g. eval=default) and set the parts you do not want to null"
    )


def null_parent(override: str, composed, overrides: list[str]) -> str | None:
    """The part of `override`'s key that is null in the config the command's group choices compose, or None."""
    choices = [o for o in overrides if "=" in o and "." not in override_key(o) and not o.startswith("~")]
    try:
        cfg = composed(choices)
    except Exception:  # noqa: BLE001 - the choices themselves do not compose: no part to name
        return None
    path = override_key(override).split(".")
    for depth in range(1, len(path)):
        part = ".".join(path[:depth])
        if OmegaConf.select(cfg, part, default="missing") is None:
            return part
    return None


def config_error_line(err: BaseException) -> str:
    """Hydra's and OmegaConf's multi-line messages as one line, the cause (which names the key) first:
    "Key 'max_stepz' not in 'TrainerConfig': Could not override 'trainer.max_stepz'. To append to
    your config use +trainer.max_stepz=3"; "... Available options in 'objective': clm, mlm, ..."."""

    def flat(e: BaseException) -> str:
        out, listing = "", False
        for line in (line.strip() for line in str(e).split("Config search path:")[0].splitlines()):
            if not line or line.startswith(("full_key:", "reference_type=", "object_type=")):
                continue
            if not out or out.endswith(":"):
                out = f"{out} {line}".strip()
            else:
                out += f", {line}" if listing else f"{'' if out.endswith('.') else '.'} {line}"
            listing = listing or line.endswith(":")
        return out

    parts = [flat(e).rstrip(".") for e in (err.__cause__, err) if e is not None]
    line = ": ".join(p for p in parts if p)
    unscheduled = re.search(
        r"Key 'schedule' not in '(\w+)Config'.*Could not override '(objective\.schedule[\w.]*)'", line
    )
    if unscheduled:  # Hydra's advice (+objective.schedule...) would fail in the objective: say what has a schedule
        return (
            f"{unscheduled[2]}: this objective ({unscheduled[1]}) has no rate to schedule: objective.schedule moves "
            f"objective.mask_rate of mlm and span_corruption"
        )
    return line
