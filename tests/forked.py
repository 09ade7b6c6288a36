"""`run(args, ...)`: `subprocess.run` for the lab's console scripts (selfsup-train, selfsup-report, ...) and
wandb's, forked from a process that has already imported torch, Lightning, Hydra and wandb.

Each command still runs in a process of its own, with the test's arguments, environment, working dir,
stdout, stderr and exit status, and ends as an interpreter does (threads joined, atexit handlers run, streams
flushed); it skips the ~6 s of imports that a new interpreter pays, and the ~2 s that tearing down the preloaded
modules would take in a forked process (`end`). selfsup itself is imported in each command.
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
import threading
import time
import weakref
from pathlib import Path

# wandb.sdk.launch: what wandb.init imports when a run starts; sklearn: what an evaluation imports
PRELOADED = [
    "torch",
    "lightning.pytorch",
    "hydra",
    "omegaconf",
    "tokenizers",
    "torchmetrics",
    "optuna",
    "wandb",
    "wandb.sdk.launch",
    "sklearn.linear_model",  # the probe's TF-IDF + logistic-regression baseline (~1 s a command)
    "sklearn.feature_extraction.text",
]
# the temporary folders wandb makes when imported and deletes at exit (module, attribute, suffix of the name)
WANDB_FOLDERS = [
    ("wandb.sdk.data_types._private", "MEDIA_TMP", "wandb-media"),
    ("wandb.sdk.artifacts.artifact", "Artifact._TMP_DIR", "wandb-artifacts"),
]
SCRIPTS = (
    "selfsup-train",
    "selfsup-report",
    "selfsup-export",
    "selfsup-sample",
    "selfsup-bench",
    "selfsup-eval",
    "wandb",
)
READ_AT_IMPORT = ("PYTHON", "TORCH")
_server: list[subprocess.Popen] = []  # this test process's forking server, started on first use


def run(args, *, env=None, cwd=None, timeout=None, capture_output=False, text=None, check=False, **kwargs):
    """subprocess.run(args, ...); forked when it captures text output (capture_output=True, text=True)."""
    env = dict(os.environ if env is None else env)
    if kwargs or not (capture_output and text) or not _forkable(args, env):
        return subprocess.run(
            args, env=env, cwd=cwd, timeout=timeout, capture_output=capture_output, text=text, check=check, **kwargs
        )
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        answer = _ask(args, env, cwd, out, err, timeout=timeout)
        if answer.get("timed_out"):
            raise subprocess.TimeoutExpired(args, timeout, out.read_text(), err.read_text())
        done = subprocess.CompletedProcess(args, answer["returncode"], out.read_text(), err.read_text())
    if check:
        done.check_returncode()
    return done


def Popen(args, *, stdout=None, stderr=None, text=None, env=None, cwd=None, start_new_session=False):
    """subprocess.Popen(args, ...) for a lab command that is sent signals or run beside others; forked when its
    output is piped as text or dropped (stdout, stderr: PIPE, DEVNULL, or stderr STDOUT)."""
    env = dict(os.environ if env is None else env)
    streams = (subprocess.PIPE, subprocess.DEVNULL)
    piped = subprocess.PIPE in (stdout, stderr)
    if (
        stdout not in streams
        or stderr not in (*streams, subprocess.STDOUT)
        or (piped and not text)
        or not _forkable(args, env)
    ):
        return subprocess.Popen(
            args, stdout=stdout, stderr=stderr, text=text, env=env, cwd=cwd, start_new_session=start_new_session
        )
    return _Forked(args, stdout, stderr, env, cwd, start_new_session)


class _Forked:
    """A command forked by the server, as subprocess.Popen shows one: pid, returncode, poll, wait, send_signal,
    kill, communicate; a piped stream is its file, followed as the command writes it until the command ends."""

    def __init__(self, args, stdout, stderr, env, cwd, start_new_session):
        self.args, self.returncode = args, None
        self._tmp = Path(tempfile.mkdtemp(prefix="selfsup-forked-"))
        self._status = self._tmp / "status"
        weakref.finalize(self, shutil.rmtree, self._tmp, True)
        out = self._tmp / "stdout" if stdout == subprocess.PIPE else Path(os.devnull)
        err = {subprocess.STDOUT: out, subprocess.PIPE: self._tmp / "stderr"}.get(stderr, Path(os.devnull))
        answer = _ask(args, env, cwd, out, err, status=self._status, session=start_new_session)
        self.pid = answer["pid"]
        self.stdout = _Follow(out, self) if stdout == subprocess.PIPE else None
        self.stderr = _Follow(err, self) if stderr == subprocess.PIPE else None

    def poll(self):
        if self.returncode is None and self._status.is_file():
            self.returncode = int(self._status.read_text())
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode

    def communicate(self, input=None, timeout=None):
        self.wait(timeout)
        return tuple(s.read() if s is not None else None for s in (self.stdout, self.stderr))

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)


class _Follow:
    """A forked command's output file, read as its pipe would be: at the end of what is written so far, a read
    waits for more until the command has ended."""

    def __init__(self, path: Path, proc: _Forked):
        path.touch()
        self._file, self._proc = open(path), proc

    def readline(self) -> str:
        line = self._file.readline()
        while not line.endswith("\n"):
            ended = self._proc.poll() is not None
            line += self._file.readline()
            if ended:
                return line
            time.sleep(0.02)
        return line

    def __iter__(self):
        return iter(self.readline, "")

    def read(self) -> str:
        self._proc.wait()
        return self._file.read()


def _forkable(args, env) -> bool:
    """A lab command whose environment sets what the preloaded libraries read when imported as this one does."""
    mine, theirs = _read_at_import(os.environ), _read_at_import(env)
    return bool(args) and args[0] in SCRIPTS and mine == theirs


def _ask(args, env, cwd, out: Path, err: Path, timeout=None, status: Path | None = None, session=False) -> dict:
    """Send one command to the server; its answer: the exit status (or timed_out), or for a detached command
    (status: the file its exit status is written to once it ends) its pid at once."""
    server = _started()
    job = {
        "args": [str(a) for a in args],
        "env": env,
        "cwd": str(cwd or os.getcwd()),
        "stdout": str(out),
        "stderr": str(err),
        "timeout": timeout,
        "status": None if status is None else str(status),
        "session": session,
    }
    server.stdin.write(json.dumps(job) + "\n")
    server.stdin.flush()
    answer = json.loads(server.stdout.readline() or "{}")
    if not answer:
        raise RuntimeError(
            f"the forking server of tests/forked.py ended: {Path(server.args[-1]).name} wrote {server.stderr.name}"
        )
    return answer


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
        if job["status"] is not None:
            print(json.dumps({"pid": detached(job)}), flush=True)
            continue
        pid = os.fork()
        if pid == 0:
            end(command, job)
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


def detached(job: dict) -> int:
    """Fork the command under a watcher process that writes its exit status to job["status"] when it ends; the
    command's pid, at once. (The watchers are reaped when the server ends.)"""
    read, write = os.pipe()
    if os.fork() == 0:  # the watcher
        os.close(read)
        pid = os.fork()
        if pid == 0:
            os.close(write)
            if job["session"]:
                os.setsid()
            end(command, job)
        os.write(write, str(pid).encode())
        os.close(write)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        Path(job["status"] + ".tmp").write_text(str(code))
        os.replace(job["status"] + ".tmp", job["status"])
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        return int(answer.read())


def end(run, *args) -> None:
    """In the forked process: run(*args), then end as an interpreter does (the traceback of an uncaught exception,
    the status of a SystemExit, threads joined, atexit handlers run, standard streams flushed), but without tearing
    down the modules it inherited from the server: that touches every object they hold, so that each page of the
    server's memory is copied on write (~2 s a command)."""
    try:
        run(*args)
        code = 0
    except SystemExit as stop:
        code = stop.code
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code & 0xFF)


def own_wandb_folders() -> None:
    """In the forked process: the temporary folders wandb made when the server imported it become folders of this
    command's own, deleted when it ends, as in a command that imported wandb itself (the server's are left to it)."""
    for module, attribute, suffix in WANDB_FOLDERS:
        owner = importlib.import_module(module)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        folder = getattr(owner, name)
        folder._finalizer.detach()
        atexit.unregister(folder.cleanup)
        folder.name = tempfile.mkdtemp(suffix=suffix)
        atexit.register(shutil.rmtree, folder.name, True)


def command(job: dict) -> None:
    """In the forked process: become the command, then raise SystemExit with its status."""
    own_wandb_folders()
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    sys.stdin = open(os.devnull)
    os.dup2(sys.stdin.fileno(), 0)
    for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
        if fd == 2 and path == job["stdout"] != os.devnull:  # stderr=STDOUT: one file, one offset
            os.dup2(1, 2)
            continue
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
