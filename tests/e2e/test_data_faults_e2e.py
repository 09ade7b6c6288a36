"""The token cache's faults through selfsup-train: a read-only data.cache_dir that needs a build and a disk that
fills up while building are one line, exit 2, with no run dir and no cache folder left; data.verify=full
rebuilds after an edit that data.verify=stat cannot see, and a reused cache says what its key covers."""

import json
import os
import subprocess
from pathlib import Path

import forked
import pytest
from conftest import TINY

QUICK = ["logger=csv", "eval.fixed=null", "eval.pairs=null", "eval.tasks=null"]  # eval off (TINY sizes its probe)


def write_corpus(path: Path, n: int = 400) -> Path:
    words = "the module returns a list of files in the folder and each file holds text about one subject".split()
    with open(path, "w") as f:
        for i in range(n):
            text = " ".join(words[(i + j) % len(words)] for j in range(60))
            f.write(json.dumps({"text": f"Document {i:04d}: {text}."}) + "\n")
    return path


def selfsup_train(*overrides, run_dir: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    return forked.run(
        ["selfsup-train", *TINY, *QUICK, f"hydra.run.dir={run_dir}", *overrides],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def the_one_line(out) -> str:
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2, out.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr[-3000:]
    return lines[0]


def mount(path: Path, options: str) -> bool:
    path.mkdir()
    return forked.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True).returncode == 0


def test_a_read_only_cache_dir_that_needs_a_build_is_one_line_and_no_run_dir(tmp_path):
    cache = tmp_path / "ro"
    if os.geteuid() == 0:  # root writes through mode 555: a read-only mount
        if not mount(cache, "ro,size=1m"):
            pytest.skip("root needs a read-only tmpfs mount here, which failed")
    else:
        cache.mkdir()
        cache.chmod(0o555)
    try:
        corpus = write_corpus(tmp_path / "corpus.jsonl")
        out = selfsup_train(
            "data=text_files", f"data.paths=[{corpus}]", f"data.cache_dir={cache}", run_dir=tmp_path / "runs" / "run"
        )
        line = the_one_line(out)
        assert (
            line.startswith(f"error: data.cache_dir={cache} cannot be written (") and "pass a writable folder" in line
        )
        assert not (tmp_path / "runs").exists()  # no run dir, no .hydra/, no error.txt
        assert list(cache.iterdir()) == []
    finally:
        if os.geteuid() == 0:
            forked.run(["umount", "-l", str(cache)], capture_output=True)
        else:
            cache.chmod(0o755)


# a run on a full disk (~5 s); the default suite: tests/data/test_data_faults.py's full disk while building, in-process
@pytest.mark.slow
def test_a_disk_full_while_preparing_data_is_one_line_and_leaves_no_cache_folder(tmp_path):
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not mount(disk, "size=256k"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        corpus = write_corpus(tmp_path / "corpus.jsonl")  # 200 KB of text: its Arrow copy and shards do not fit
        out = selfsup_train(
            "data=text_files", f"data.paths=[{corpus}]", f"data.cache_dir={disk}", run_dir=tmp_path / "runs" / "run"
        )
        line = the_one_line(out)
        assert line.startswith(
            f"error: data.cache_dir={disk} ran out of space while building the token cache "
            f"(No space left on device); nothing of it was kept: free space there or point "
            f"data.cache_dir at a folder with more room"
        ), line
        assert list(disk.iterdir()) == []  # the build's scratch (and datasets' .arrow inside it) removed
        assert not (tmp_path / "runs").exists()
    finally:
        forked.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.mark.slow  # three runs; the default suite: tests/data/test_data_faults.py, in-process
def test_an_edit_keeping_size_and_mtime_reuses_the_cache_under_stat_and_rebuilds_under_verify_full(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    data = ["data=text_files", f"data.paths=[{corpus}]", f"data.cache_dir={tmp_path / 'cache'}"]
    first = selfsup_train(*data, run_dir=tmp_path / "r1")
    assert first.returncode == 0, first.stderr[-3000:]
    stat = corpus.stat()
    text = corpus.read_text()
    corpus.write_text(text.replace("Document 0000:", "Document 9999:"))
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    stale = selfsup_train(*data, run_dir=tmp_path / "r2")
    assert stale.returncode == 0, stale.stderr[-3000:]
    assert "prepared " not in stale.stderr  # reused: the limit of data.verify=stat, said in one line
    [line] = [x for x in stale.stdout.splitlines() if "reused token cache" in x]  # Hydra's console, at start
    assert line.endswith("reused token cache by file sizes+mtimes; data.verify=full hashes") and len(line) < 100
    full = selfsup_train(*data, "data.verify=full", run_dir=tmp_path / "r3")
    assert full.returncode == 0, full.stderr[-3000:]
    assert "prepared " in full.stderr  # rebuilt from the edited file
    assert len(list((tmp_path / "cache").glob("*/meta.json"))) == 2  # the stale cache and the rebuilt one
