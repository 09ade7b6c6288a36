"""The Hydra-safe DDP and FSDP strategies (see selfsup.training.distributed): their launcher starts ranks > 0 as
`python -m selfsup.run.worker RESOLVED_CONFIG RUN_DIR`; FSDP2 shards each transformer block."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy
from torch.distributed.fsdp import FSDPModule, fully_shard

from selfsup.common.upstream import data_parallel_only, set_launcher, subprocess_script_launcher
from selfsup.models.transformer import Block


class WorkerLauncher(subprocess_script_launcher()):
    def __init__(self, cluster_environment, num_processes: int, num_nodes: int, config_path: Path, run_dir: Path):
        super().__init__(cluster_environment, num_processes, num_nodes)
        self.config_path, self.run_dir = config_path, run_dir

    def _call_children_scripts(self) -> None:  # Lightning's hook (pinned by tests/test_upstream.py), our command
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
            command = [sys.executable, "-m", "selfsup.run.worker", str(self.config_path), str(self.run_dir)]
            self.procs.append(subprocess.Popen(command, env=env))


class _WorkerLaunch:
    """Mixin for a Lightning strategy: its launcher starts the other ranks with selfsup.run.worker."""

    def __init__(self, config_path: Path, run_dir: Path, **kwargs):
        super().__init__(**kwargs)
        self.config_path, self.run_dir = config_path, run_dir

    def _configure_launcher(self) -> None:  # Lightning's hook (pinned by tests/test_upstream.py)
        if not self.cluster_environment.creates_processes_externally:
            set_launcher(
                self,
                WorkerLauncher(
                    self.cluster_environment, self.num_processes, self.num_nodes, self.config_path, self.run_dir
                ),
            )


class HydraSafeDDPStrategy(_WorkerLaunch, DDPStrategy):
    """DDP: every rank holds the whole model; gradients are averaged."""


class HydraSafeFSDPStrategy(_WorkerLaunch, ModelParallelStrategy):
    """FSDP2: parameters, gradients and optimizer state sharded over all ranks (no tensor parallelism);
    checkpoints are gathered into one file on rank 0, like every other strategy's."""

    def __init__(self, config_path: Path, run_dir: Path, **kwargs):
        super().__init__(config_path, run_dir, save_distributed_checkpoint=False, **kwargs)

    def setup_environment(self) -> None:
        data_parallel_only(self)
        super().setup_environment()


def shard(model, device_mesh) -> None:
    """Apply fully_shard to each transformer block, then to the whole model (the root unit).
    Called from the LightningModule's configure_model when the strategy provides a device mesh."""
    if isinstance(model, FSDPModule):
        return  # configure_model can run more than once
    mesh = device_mesh["data_parallel"]
    for block in [m for m in model.modules() if isinstance(m, Block)]:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
