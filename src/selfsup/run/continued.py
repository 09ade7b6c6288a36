"""Continued pretraining: `init.from=RUN_DIR` starts a run from a finished lab run's weights (its last.ckpt).

The weights fit a run of the same family, and between an encoder and a decoder: the same transformer (one stack,
the same head), its attention made bidirectional or causal, as in the CLM -> MLM studies (Gisserot-Boukhlef et al.
2025). The child takes the parent's architecture settings; its tokenizer must be the parent's (the same data
settings make the same tokenizer); its positions are the parent's first rows. What does not fit is refused in one
line. The run records its lineage (summary.json `parent`, `chain`; the W&B run *uses* the parent's model artifact),
and a trainer.max_flops or max_tokens budget counts the chain's FLOPs and tokens, not the run's alone.

In a sweep, `init.from=sweep:KEY=VALUE` names the earlier job of the same sweep whose overrides are this job's with
KEY=VALUE instead (experiment=compare_continued: `arm=clm_half` for the arm `clm_then_mlm`, at the same seed).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from selfsup.common.names import (
    CHECKPOINTS,
    DECODER,
    ENCODER,
    HYDRA_DIR,
    LAST_CHECKPOINT,
    RECORDED_CONFIG,
    TOKENIZER,
    WANDB_RUN_ID,
    RunSummary,
    override_key,
)
from selfsup.errors import UserError

SIBLING = "sweep:"  # init.from=sweep:KEY=VALUE: an earlier job of this sweep
ARROW = " → "


def is_run_dir(source: str | None) -> bool:
    """Whether init.from names a lab run dir (its .hydra/config.yaml), not a transformers folder or hub name."""
    return bool(source) and (source.startswith(SIBLING) or (Path(source).expanduser() / RECORDED_CONFIG).is_file())


@dataclass(frozen=True)
class Parent:
    """A finished lab run a run continues from: what its summary.json says, with its own ancestors' totals."""

    run_dir: Path
    objective: str
    family: str
    steps: int
    flops: float  # the chain's training FLOPs up to and including this run
    tokens: float  # the chain's input tokens
    chain_steps: int
    stages: tuple  # "clm 600", ... from the first ancestor to this run
    config: dict  # its recorded config (architecture, data)
    wandb_id: str | None

    def record(self) -> dict:
        """summary.json's `parent`."""
        return {
            "run_dir": str(self.run_dir),
            "objective": self.objective,
            "architecture": self.family,
            "steps": self.steps,
            "chain_flops_seen": self.flops,
            "chain_tokens_seen": self.tokens,
            "chain_steps": self.chain_steps,
            "chain": ARROW.join(self.stages),
        }

    def chain(self, objective: str, steps: int) -> str:
        """The chain as one arm: `clm 600 → mlm 600`."""
        return ARROW.join([*self.stages, f"{objective} {steps}"])


def same_job_but(reference: str, overrides: list[str]):
    """For `sweep:KEY=VALUE`: (whether a job's overrides are `overrides` with KEY=VALUE instead, KEY=VALUE)."""
    wanted = reference.removeprefix(SIBLING)
    if "=" not in wanted:
        raise UserError(f"init.from={reference} names no job: use init.from=sweep:KEY=VALUE (e.g. sweep:arm=clm_half)")
    key = override_key(wanted)
    expected = sorted([o for o in overrides if override_key(o) not in (key, "init.from")] + [wanted])
    return (lambda theirs: sorted(o for o in theirs if override_key(o) != "init.from") == expected), wanted


def sibling(reference: str, sweep_dir: Path, overrides: list[str]) -> Path:
    """The job dir of `sweep:KEY=VALUE`: the earlier job of sweep_dir whose overrides are `overrides` with KEY=VALUE."""
    matches, wanted = same_job_but(reference, overrides)
    for job in sorted(p for p in sweep_dir.iterdir() if (p / HYDRA_DIR / "overrides.yaml").is_file()):
        if matches(yaml.safe_load((job / HYDRA_DIR / "overrides.yaml").read_text()) or []):
            return job
    others = " ".join(o for o in overrides if override_key(o) not in (override_key(wanted), "init.from"))
    raise UserError(
        f"init.from={reference}: no job of the sweep {sweep_dir} ran {wanted} with this job's other settings "
        f"({others or 'none'}): list {wanted} before the jobs that continue from it"
    )


def resolve(source: str, run_dir: Path | None = None) -> str:
    """init.from as a run dir: `sweep:KEY=VALUE` found among the jobs of this job's sweep (run_dir's, when its
    recorded config is read again: a resume, the report), else `source` as it is."""
    if not source.startswith(SIBLING):
        return source
    record = run_dir / HYDRA_DIR / "overrides.yaml" if run_dir is not None else None
    if record is not None and record.is_file():
        return str(sibling(source, run_dir.parent, yaml.safe_load(record.read_text()) or []))
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized() and HydraConfig.get().mode.name == "MULTIRUN":
        hc = HydraConfig.get()
        return str(sibling(source, Path(hc.sweep.dir), list(hc.overrides.task)))
    raise UserError(
        f"init.from={source} names a job of a sweep: use it in a sweep (selfsup-train -m ...), or pass the job's "
        f"run dir"
    )


def check_sibling(source: str, overrides: list[str], earlier: list[list[str]], family_of) -> None:
    """Before a sweep starts: `sweep:KEY=VALUE` is an earlier job of the sweep whose family fits this one's
    (family_of(overrides) composes a job's architecture)."""
    matches, wanted = same_job_but(source, overrides)
    for job in earlier:
        if matches(job):
            parent, child = family_of(job), family_of(overrides)
            if not fits(parent, child):
                raise UserError(
                    f"init.from={source} is a {parent} job, this one trains a {child}: a run continues from one of "
                    f"its own family, or an encoder from a decoder and back"
                )
            return
    raise UserError(f"init.from={source}: no earlier job of this sweep runs {wanted}: list it before this one")


def read_parent(source: str) -> Parent:
    """The finished run at `source` (a run dir), or a one-line refusal."""
    run_dir = Path(source).expanduser()
    summary = RunSummary.read(run_dir)
    status = summary.values.get("status")
    if not summary.found or summary.problem:
        raise UserError(
            f"init.from={source} has no readable summary.json ({summary.problem or 'none'}): continue from a run "
            f"that finished"
        )
    if status != "finished" or not (run_dir / LAST_CHECKPOINT).is_file():
        raise UserError(
            f"init.from={source} is a run that did not finish (status {status}"
            f"{'' if (run_dir / LAST_CHECKPOINT).is_file() else ', no ' + CHECKPOINTS + '/last.ckpt'}): finish it "
            f"first (selfsup-train resume={source}), then continue from it"
        )
    config = trained_config(run_dir / LAST_CHECKPOINT, source)
    values = summary.values
    before = values.get("parent") or {}
    steps = int(values.get("steps") or 0)
    wandb_id = (run_dir / WANDB_RUN_ID).read_text().strip() if (run_dir / WANDB_RUN_ID).is_file() else None
    stage = f"{values.get('objective')} {steps}"
    return Parent(
        run_dir=run_dir.resolve(),
        objective=str(values.get("objective")),
        family=str(values.get("architecture")),
        steps=steps,
        flops=float(before.get("chain_flops_seen") or 0.0) + float(values.get("flops_seen") or 0.0),
        tokens=float(before.get("chain_tokens_seen") or 0.0) + float(values.get("tokens_seen") or 0.0),
        chain_steps=int(before.get("chain_steps") or 0) + steps,
        stages=(*([s for s in str(before["chain"]).split(ARROW)] if before.get("chain") else []), stage),
        config=config,
        wandb_id=wandb_id,
    )


def trained_config(checkpoint: Path, source: str) -> dict:
    """The resolved config a checkpoint was trained with (its architecture as built: an init.from's settings
    included, which the run dir's .hydra/config.yaml does not hold)."""
    from selfsup.reliability.checkpoints import load_checkpoint_safely

    record = load_checkpoint_safely(checkpoint, map_location="cpu", mmap=True).get("selfsup") or {}
    config = record.get("config")
    if not isinstance(config, dict) or "architecture" not in config:
        raise UserError(f"init.from={source}: {checkpoint} records no architecture settings: it cannot be continued")
    return config


def fits(parent: str, child: str) -> bool:
    """Whether a `parent` family's weights fit a `child` family's model: the same family, or encoder <-> decoder."""
    return parent == child or {parent, child} == {ENCODER, DECODER}


def with_parent(cfg: DictConfig, source: str) -> DictConfig:
    """The run's config with the parent's architecture settings (its family the objective's); init.from=sweep:...
    resolved to the job's dir. A parent whose family does not fit is refused in one line."""
    parent = read_parent(source)
    family = cfg.architecture.name
    if not fits(parent.family, family):
        raise UserError(
            f"init.from={source} is a {parent.family} run ({parent.objective}), objective="
            f"{cfg.objective.get('name') or '?'} trains a {family}: a run continues from one of its own family, or an "
            f"encoder from a decoder and back (the same transformer, its attention changed)"
        )
    architecture = {**parent.config["architecture"], "name": family}
    return OmegaConf.merge(cfg, {"architecture": architecture, "init": {"from": str(parent.run_dir)}})


def with_own_record(cfg: DictConfig, source: str, run_dir: Path) -> DictConfig:
    """A continued run's recorded config read again (selfsup-eval, a resume): the architecture its own last.ckpt
    was trained with, so that its parent need not be there; init.from resolved where it can be (a resume's budget
    and lineage read the parent, and say so in one line where it is gone)."""
    architecture = trained_config(run_dir / LAST_CHECKPOINT, source)["architecture"]
    try:
        source = resolve(source, run_dir)
    except UserError:
        pass
    return OmegaConf.merge(cfg, {"architecture": architecture, "init": {"from": source}})


def check_tokenizer(parent: Parent, tokenizer_json: str, data: dict) -> None:
    """The run's tokenizer is its parent's (the weights' rows belong to its tokens), or a one-line refusal that
    names the data settings that differ."""
    from tokenizers import Tokenizer

    source = str(parent.run_dir)
    if not (parent.run_dir / TOKENIZER).is_file():
        raise UserError(f"init.from={source} has no {TOKENIZER}: continue from a run dir as selfsup-train wrote it")
    if Tokenizer.from_file(str(parent.run_dir / TOKENIZER)).to_str() == tokenizer_json:
        return
    recorded = parent.config.get("data") or {}
    differ = [f"data.{k}={recorded.get(k)} there, {v} here" for k, v in data.items() if recorded.get(k) != v]
    differ = [d for d in differ if not d.startswith("data.cache_dir")]
    raise UserError(
        f"init.from={source} was trained with another tokenizer ({'; '.join(differ[:3]) or 'its tokenizer.json'}): "
        f"a run continues with its parent's tokenizer: use the parent's data settings"
    )


def load_weights(parent: Parent, model, family: str) -> None:
    """The parent's last weights into `model` (of `family`): an encoder's stack into a decoder's and back, its first
    positions."""
    from selfsup.interop.pretrained import _state_dict
    from selfsup.reliability.checkpoints import load_checkpoint_safely

    source = str(parent.run_dir)
    path = parent.run_dir / LAST_CHECKPOINT
    weights = _state_dict(load_checkpoint_safely(path, map_location="cpu"), path)
    stacks = {ENCODER: "encoder.", DECODER: "decoder."}
    if parent.family != family and {parent.family, family} == set(stacks):
        old, new = stacks[parent.family], stacks[family]
        weights = {(new + k.removeprefix(old) if k.startswith(old) else k): v for k, v in weights.items()}
    own = model.state_dict()
    for key, value in list(weights.items()):
        if key.endswith("pos_emb.weight") and key in own and value.shape[0] != own[key].shape[0]:
            if value.shape[0] < own[key].shape[0]:
                raise UserError(
                    f"init.from={source} has {value.shape[0]} positions, this run needs {own[key].shape[0]}: "
                    f"continue with data.seq_len at most the parent's"
                )
            weights[key] = value[: own[key].shape[0]]
    missing, unexpected = (set(own) - set(weights)), (set(weights) - set(own))
    if missing or unexpected:
        raise UserError(
            f"init.from={source}: its weights do not fit this run's model ("
            f"{'missing ' + sorted(missing)[0] if missing else 'unexpected ' + sorted(unexpected)[0]})"
        )
    model.load_state_dict(weights)
