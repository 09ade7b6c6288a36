"""`run(args, ...)`: `subprocess.run` for the lab's console scripts (selfsup-train, selfsup-report, ...),
forked from a process that has already imported torch, Lightning and Hydra.

Each command still runs in a process of its own, with the test's arguments, environment, working dir,
stdout, stderr and exit status, and exits as an interpreter does (threads joined, atexit handlers run);
it skips the ~5 s of imports that a new interpreter pays. selfsup itself is imported in each command.
A command whose environment changes what the preloaded libraries read when imported (PYTHON*, TORCH_*)
runs in a new interpreter, as do other programs. Run as a script, this file is that process: it reads
one command per line (JSON) on stdin, forks it, and answers with its exit status.
"""

import atexit
import importlib
import importlib.metadata
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# not wandb: it makes a temporary folder when imported, which the first command to end would delete for the others
PRELOADED = ["torch", "lightning.pytorch", "hydra", "omegaconf", "tokenizers", "torchmetrics", "optuna"]
SCRIPTS = ("selfsup-train", "selfsup-report", "selfsup-export", "selfsup-sample", "selfsup-bench")
READ_AT_IMPORT = ("PYTHON", "TORCH")
_server: list[subprocess.Popen] = []  # this test process's forking server, started on first use


def run(args, *, env=None, cwd=None, timeout=None, capture_output=False, text=None, check=False, **kwargs):
    """subprocess.run(args, ...); forked when it captures text output (capture_output=True, text=True)."""
    env = dict(os.environ if env is None else env)
    if (
        kwargs
        or not (capture_output and text)
        or not args
        or args[0] not in SCRIPTS
        or any(_read_at_import(env).get(k) != v for k, v in _read_at_import(os.environ).items())
        or _read_at_import(env).keys() - _read_at_import(os.environ).keys()
    ):
        return subprocess.run(
            args, env=env, cwd=cwd, timeout=timeout, capture_output=capture_output, text=text, check=check, **kwargs
        )
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        server = _started()
        job = {
            "args": [str(a) for a in args],
            "env": env,
            "cwd": str(cwd or os.getcwd()),
            "stdout": str(out),
            "stderr": str(err),
            "timeout": timeout,
        }
        server.stdin.write(json.dumps(job) + "\n")
        server.stdin.flush()
        answer = json.loads(server.stdout.readline() or '{"returncode": null}')
        if answer.get("timed_out"):
            raise subprocess.TimeoutExpired(args, timeout, out.read_text(), err.read_text())
        if answer["returncode"] is None:
            raise RuntimeError(
                f"the forking server of tests/forked.py ended: {Path(server.args[-1]).name} wrote {server.stderr.name}"
            )
        done = subprocess.CompletedProcess(args, answer["returncode"], out.read_text(), err.read_text())
    if check:
        done.check_returncode()
    return done


def _read_at_import(env) -> dict:
    return {k: v for k, v in env.items() if k.startswith(READ_AT_IMPORT)}


def _started() -> subprocess.Popen:
    if not _server or _server[0].poll() is not None:
        log = tempfile.NamedTemporaryFile("w+", prefix="selfsup-forked-", suffix=".log", delete=False)
        _server[:] = [
            subprocess.Popen(
                [sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
            )
        ]
        _server[0].stderr = log
        atexit.register(_server[0].kill)
    return _server[0]


def serve() -> None:
    # a command imports Lightning after Hydra has set up logging; Lightning, finding no handler on the root
    # logger, would add its own console handler (and print what a command leaves to Hydra's log file)
    logging.getLogger().addHandler(logging.NullHandler())
    for name in PRELOADED:
        importlib.import_module(name)
    for line in sys.stdin:
        job = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            command(job)  # raises SystemExit: this process ends as an interpreter does
        deadline = None if job["timeout"] is None else time.monotonic() + job["timeout"]
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
            if deadline is not None and time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                print(json.dumps({"timed_out": True}), flush=True)
                break
            time.sleep(0.02)
        else:
            print(json.dumps({"returncode": os.waitstatus_to_exitcode(done[1])}), flush=True)


def command(job: dict) -> None:
    """In the forked process: become the command, then raise SystemExit with its status."""
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    sys.stdin = open(os.devnull)
    os.dup2(sys.stdin.fileno(), 0)
    for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
        opened = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    name = job["args"][0]
    sys.argv = [shutil.which(name) or name, *job["args"][1:]]
    [script] = importlib.metadata.entry_points(group="console_scripts", name=name)
    raise SystemExit(script.load()())


if __name__ == "__main__":
    sys.path.pop(0)  # this folder (tests/): the command sees the import path a console script sees
    serve()
