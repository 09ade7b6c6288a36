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


@pytest.mark.slow  # a forking server of its own (~10 s)
def test_a_forked_command_ends_with_its_own_wandb_folders_gone_and_leaves_the_servers(tmp_path, monkeypatch):
    """wandb makes two temporary folders when imported and deletes them at exit: each forked command gets its own,
    gone when it ends, and the server's, which every command inherits, stay (a server of this test's own, whose
    temporary folders are in tmp_path)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(forked, "_server", [])
    try:
        assert forked.run(["wandb", "--version"], capture_output=True, text=True, timeout=300).returncode == 0
        servers = wandb_folders(tmp_path)
        assert sorted(name.rsplit("wandb-", 1)[-1] for name in servers) == ["artifacts", "media"], servers
        for _ in range(2):
            done = forked.run(["wandb", "--version"], capture_output=True, text=True, timeout=300)
            assert done.returncode == 0 and done.stdout.startswith("wandb, version"), done.stderr
            assert wandb_folders(tmp_path) == servers
        proc = forked.Popen(["wandb", "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert isinstance(proc, forked._Forked) and proc.communicate(timeout=300)[0].startswith("wandb, version")
        assert proc.returncode == 0 and wandb_folders(tmp_path) == servers
    finally:
        for server in forked._server:
            server.kill()


def wandb_folders(root):
    return sorted(p.name for p in root.iterdir() if "wandb-" in p.name)
