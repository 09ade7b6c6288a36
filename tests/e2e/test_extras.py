"""Each extra installs everything its command needs: installed into a fresh virtual environment (torch pinned
first, as the README says), then its documented command run there end to end. Slow: minutes of pip."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "PYTHON", "VIRTUAL_ENV"))}


def venv_with(tmp_path: Path, extra: str) -> Path:
    """A fresh venv holding torch==2.13.0 and this checkout with `extra`: its bin folder."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    for args in (["torch==2.13.0"], ["-e", f"{REPO}[{extra}]"]):
        done = subprocess.run([*pip, *args], capture_output=True, text=True, env=ENV, timeout=1800)
        assert done.returncode == 0, done.stderr[-3000:]
    return venv / "bin"


@pytest.mark.slow
def test_the_lmeval_extra_scores_a_run_on_a_local_task(tmp_path):
    """Before: `pip install -e '.[lmeval]'` then the documented command ended in ModuleNotFoundError: accelerate."""
    bin_ = venv_with(tmp_path, "lmeval")
    env = {**ENV, "PATH": f"{bin_}{os.pathsep}{ENV.get('PATH', '')}", "WANDB_MODE": "offline"}

    def run(*args):
        done = subprocess.run(list(args), capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    run(
        "selfsup-train",
        "debug=tiny",
        "eval=none",
        "objective=clm",
        "data.seq_len=128",
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    run(str(bin_ / "python"), "-m", "selfsup.lmeval", "tasks", str(tmp_path / "tasks"))
    out = run(
        "selfsup-eval",
        str(tmp_path / "run"),
        "lm_eval.tasks=[selfsup_pairs]",
        f"lm_eval.include_path=[{tmp_path / 'tasks'}]",
        "lm_eval.limit=20",
        "lm_eval.random_init_seeds=2",
    )
    assert "lm-eval in " in out.stdout
    assert "eval/lm_eval/selfsup_pairs/acc" in (tmp_path / "run" / "evaluated.json").read_text()
