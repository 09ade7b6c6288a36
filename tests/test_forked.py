"""tests/forked.py runs the lab's commands as a new process does: same exit status, stdout and stderr."""

import os
import subprocess

import forked
import pytest


@pytest.mark.slow  # the tests' forking helper against new processes (~20 s)
def test_a_forked_command_says_and_exits_what_a_new_process_does(tmp_path):
    """forked.run and forked.Popen (stderr piped, or to stdout) against subprocess.run of the same command."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    for args in (
        ["selfsup-train", "trainer.max_steps=-3", f"hydra.run.dir={tmp_path / 'run'}"],
        ["selfsup-report", str(tmp_path / "missing")],
    ):
        fresh = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert fresh.returncode == 2 and fresh.stdout == "" and fresh.stderr.startswith("error: ")
        again = forked.run(args, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert (again.returncode, again.stdout, again.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
        for stderr, said in (
            (subprocess.PIPE, (fresh.stdout, fresh.stderr)),
            (subprocess.STDOUT, (fresh.stderr, None)),
        ):
            proc = forked.Popen(args, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=tmp_path)
            assert isinstance(proc, forked._Forked) and proc.pid != os.getpid()
            assert proc.communicate(timeout=300) == said and proc.returncode == proc.poll() == 2
    assert not (tmp_path / "run").exists()
