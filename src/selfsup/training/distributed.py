"""DDP and FSDP under Hydra without stray output dirs or duplicate W&B runs.

FSDP is PyTorch's FSDP2 (`fully_shard`) through Lightning's ModelParallelStrategy, all ranks on
the data-parallel axis: each transformer block is one unit, the embeddings (shared with the output
head) and final norm stay in the root unit. FSDP2 runs on GPUs (NCCL) and on CPU processes (gloo),
so the CPU tests run the same sharded code path as a GPU node.

Lightning's `ddp` and `fsdp` strategies start ranks > 0 by running the script again with the same
command line. Under Hydra that makes each rank compose its own config, create its own output dir
and its own W&B run, and under `-m` run a whole new sweep (a known Lightning + Hydra problem).
Here the other ranks start `python -m selfsup.run.worker RESOLVED_CONFIG RUN_DIR` instead: they train
from the job's resolved config, in the job's run dir, with no Hydra, no loggers and no summary.
Under SLURM or torchrun every rank is started by the cluster and no launcher runs at all.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch.distributed as dist

from selfsup.common.names import RESOLVED_CONFIG


def launched_rank() -> int:
    """This process's global rank when a cluster launcher started every rank itself (torchrun sets
    RANK, srun SLURM_PROCID); 0 otherwise, also for selfsup's own DDP/FSDP launch (rank 0 is the app)."""
    for var in ("RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def shared_job_id() -> str | None:
    """A name all ranks of an externally launched multi-process job share: SLURM's job id (srun with
    several tasks) or torchrun's rendezvous id (`--standalone` makes a fresh one per launch)."""
    if int(os.environ.get("SLURM_NTASKS", "1") or 1) > 1 and os.environ.get("SLURM_JOB_ID"):
        return f"slurm-{os.environ['SLURM_JOB_ID']}"
    if os.environ.get("TORCHELASTIC_RUN_ID") and int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        return f"torchrun-{os.environ['TORCHELASTIC_RUN_ID']}"
    return None


def leave_distributed(env_before: set[str]) -> None:
    """Undo what a DDP launch left in this process, so that the next job of a sweep starts clean:
    the launcher's MASTER_*/LOCAL_RANK/... variables (with LOCAL_RANK set, Lightning would think
    another launcher made the processes) and the process group."""
    for key in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "RANK"):
        if key not in env_before:
            os.environ.pop(key, None)
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def strategy_for(name: str, run_dir: Path):
    """`ddp` and `fsdp` become the Hydra-safe strategies above, whose ranks > 0 read the job's resolved config
    from RESOLVED_CONFIG in the run dir (written by rank zero, resolved_config_path); anything else goes to
    Lightning as it is."""
    if name not in ("ddp", "fsdp"):
        return name
    # Imported here, not at the top: selfsup.training.strategies brings Lightning (~5 s); selfsup.run.run_dir imports this module
    from selfsup.training.strategies import HydraSafeDDPStrategy, HydraSafeFSDPStrategy

    if name == "ddp":
        return HydraSafeDDPStrategy(resolved_config_path(run_dir), run_dir)
    return HydraSafeFSDPStrategy(resolved_config_path(run_dir), run_dir)


def resolved_config_path(run_dir: Path) -> Path:
    """Where rank zero writes the job's resolved config for the ranks > 0 of a ddp or fsdp job."""
    return run_dir / RESOLVED_CONFIG
