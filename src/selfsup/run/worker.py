"""A DDP rank > 0 of a selfsup-train job: `python -m selfsup.run.worker RESOLVED_CONFIG RUN_DIR`.

Started by selfsup.training.strategies.WorkerLauncher, never by hand. Trains from the job's resolved
config in the job's run dir; rank 0 (the Hydra job) owns the outputs, loggers and summary.
"""

import sys
from pathlib import Path

from omegaconf import OmegaConf

from selfsup.run.lifecycle import fit
from selfsup.run.schema import register
from selfsup.run.settings import RunSettings

if __name__ == "__main__":
    register()
    config, run_dir = sys.argv[1], Path(sys.argv[2])
    fit(RunSettings.of(OmegaConf.load(config)), run_dir, rank_zero=False)
