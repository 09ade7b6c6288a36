"""DDP under Hydra without stray output dirs or duplicate W&B runs.

Lightning's `ddp` strategy starts ranks > 0 by running the script again with the same command
line. Under Hydra that makes each rank compose its own config, create its own output dir and its
own W&B run, and under `-m` run a whole new sweep (a known Lightning + Hydra problem). Here the
other ranks start `python -m selfsup.worker RESOLVED_CONFIG RUN_DIR` instead: they train from the
job's resolved config, in the job's run dir, with no Hydra, no loggers and no summary.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.strategies.launchers.subprocess_script import _SubprocessScriptLauncher


class WorkerLauncher(_SubprocessScriptLauncher):
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


class HydraSafeDDPStrategy(DDPStrategy):
    """DDPStrategy whose launcher starts the other ranks with selfsup.worker."""

    def __init__(self, config_path: Path, run_dir: Path, **kwargs):
        super().__init__(**kwargs)
        self.config_path, self.run_dir = config_path, run_dir

    def _configure_launcher(self) -> None:
        self._launcher = WorkerLauncher(self.cluster_environment, self.num_processes, self.num_nodes,
                                        self.config_path, self.run_dir)
