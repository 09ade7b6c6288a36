"""DDP and FSDP under Hydra without stray output dirs or duplicate W&B runs.

FSDP is PyTorch's FSDP2 (`fully_shard`) through Lightning's ModelParallelStrategy, all ranks on
the data-parallel axis: each transformer block is one unit, the embeddings (shared with the output
head) and final norm stay in the root unit. FSDP2 runs on GPUs (NCCL) and on CPU processes (gloo),
so the CPU tests run the same sharded code path as a GPU node.

Lightning's `ddp` and `fsdp` strategies start ranks > 0 by running the script again with the same
command line. Under Hydra that makes each rank compose its own config, create its own output dir
and its own W&B run, and under `-m` run a whole new sweep (a known Lightning + Hydra problem).
Here the other ranks start `python -m selfsup.worker RESOLVED_CONFIG RUN_DIR` instead: they train
from the job's resolved config, in the job's run dir, with no Hydra, no loggers and no summary.
Under SLURM or torchrun every rank is started by the cluster and no launcher runs at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy
from omegaconf import DictConfig, OmegaConf

from selfsup.upstream import SubprocessScriptLauncher


class WorkerLauncher(SubprocessScriptLauncher):
    def __init__(self, cluster_environment, num_processes: int, num_nodes: int, config_path: Path, run_dir: Path):
        super().__init__(cluster_environment, num_processes, num_nodes)
        self.config_path, self.run_dir = config_path, run_dir

    def _call_children_scripts(self) -> None:  # Lightning's, with our command for the children
        self._check_can_spawn_children()
        self.procs = []
        os.environ["MASTER_ADDR"] = self.cluster_environment.main_address
        os.environ["MASTER_PORT"] = str(self.cluster_environment.main_port)
        os.environ["NODE_RANK"] = str(self.cluster_environment.node_rank())
        os.environ["LOCAL_RANK"] = str(self.cluster_environment.local_rank())
        os.environ["WORLD_SIZE"] = f"{self.num_processes * self.num_nodes}"
        for local_rank in range(1, self.num_processes):
            env = os.environ.copy()
            env["LOCAL_RANK"] = str(local_rank)
            command = [sys.executable, "-m", "selfsup.worker", str(self.config_path), str(self.run_dir)]
            self.procs.append(subprocess.Popen(command, env=env))


class _WorkerLaunch:
    """Mixin for a Lightning strategy: its launcher starts the other ranks with selfsup.worker."""

    def __init__(self, config_path: Path, run_dir: Path, **kwargs):
        super().__init__(**kwargs)
        self.config_path, self.run_dir = config_path, run_dir

    def _configure_launcher(self) -> None:
        if not self.cluster_environment.creates_processes_externally:
            self._launcher = WorkerLauncher(self.cluster_environment, self.num_processes, self.num_nodes,
                                            self.config_path, self.run_dir)


class HydraSafeDDPStrategy(_WorkerLaunch, DDPStrategy):
    """DDP: every rank holds the whole model; gradients are averaged."""


class HydraSafeFSDPStrategy(_WorkerLaunch, ModelParallelStrategy):
    """FSDP2: parameters, gradients and optimizer state sharded over all ranks (no tensor parallelism);
    checkpoints are gathered into one file on rank 0, like every other strategy's."""

    def __init__(self, config_path: Path, run_dir: Path, **kwargs):
        super().__init__(config_path, run_dir, save_distributed_checkpoint=False, **kwargs)

    def setup_environment(self) -> None:
        self._data_parallel_size, self._tensor_parallel_size = self.num_nodes * self.num_processes, 1
        super().setup_environment()


def shard(model, device_mesh) -> None:
    """Apply fully_shard to each transformer block, then to the whole model (the root unit).
    Called from the LightningModule's configure_model when the strategy provides a device mesh."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    from selfsup.models.transformer import Block
    if isinstance(model, FSDPModule):
        return  # configure_model can run more than once
    mesh = device_mesh["data_parallel"]
    for block in [m for m in model.modules() if isinstance(m, Block)]:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)


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
    import torch.distributed as dist
    for key in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "RANK"):
        if key not in env_before:
            os.environ.pop(key, None)
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def strategy_for(cfg: DictConfig, run_dir: Path, rank_zero: bool):
    """`ddp` and `fsdp` become the Hydra-safe strategies above; anything else goes to Lightning as it is."""
    name = cfg.trainer.strategy
    if name not in ("ddp", "fsdp"):
        return name
    config_path = run_dir / ".hydra" / "resolved.yaml"
    if rank_zero:
        config_path.parent.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(cfg, config_path, resolve=True)
    if name == "ddp":
        return HydraSafeDDPStrategy(config_path, run_dir)
    return HydraSafeFSDPStrategy(config_path, run_dir)
