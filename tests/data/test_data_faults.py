"""The token cache's faults, in-process: a cache_dir that cannot be written, a disk that fills up while
building, and what the cache key covers (data.verify=stat | full, a hub data set's moving branch)."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import subprocess
from pathlib import Path

import pytest
from helpers import write_corpus

import selfsup.data.corpus as corpus_module
import selfsup.data.prepare as prepare_module
import selfsup.data.sources as sources_module
from selfsup.data import Corpus
from selfsup.data.hf_dataset import iter_hf_documents
from selfsup.data.sources import DataError


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"))


def corpus(folder, cache, **kw):
    return Corpus(source="text_files", paths=[folder], vocab_size=400, n_sentinels=8, cache_dir=cache, **kw)


def _mount(path: Path, options: str) -> bool:
    path.mkdir(exist_ok=True)
    return (
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True).returncode == 0
    )


@contextlib.contextmanager
def read_only_folder(path: Path):
    """An empty folder this process cannot write into: a read-only tmpfs for root (who ignores permissions),
    mode 555 for anyone else."""
    if os.geteuid() == 0:
        if not _mount(path, "ro,size=1m"):
            pytest.skip("root needs a read-only tmpfs mount here (mount -t tmpfs -o ro), which failed")
        try:
            yield path
        finally:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)  # lazy: open memory maps
    else:
        path.mkdir()
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)


@contextlib.contextmanager
def small_disk(path: Path, size: str):
    if os.geteuid() != 0 or not _mount(path, f"size={size}"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


# ---------------------------------------------------------------------------------------- (a) read-only


def test_a_read_only_cache_dir_that_needs_a_build_is_one_data_error(corpus_dir, tmp_path):
    with read_only_folder(tmp_path / "ro") as folder:
        with pytest.raises(
            DataError,
            match=r"^data\.cache_dir=.*ro cannot be written \(.*\), and it holds no token "
            r"cache for these settings: pass a writable folder",
        ):
            corpus(corpus_dir, folder).prepare()
        assert list(folder.iterdir()) == []


def test_a_read_only_cache_dir_that_holds_the_cache_is_reused(corpus_dir, tmp_path):
    if os.geteuid() != 0 or not _mount(tmp_path / "disk", "size=20m"):
        pytest.skip("needs root to mount a tmpfs and remount it read-only")
    try:
        built = corpus(corpus_dir, tmp_path / "disk")
        built.prepare()
        subprocess.run(["mount", "-o", "remount,ro", str(tmp_path / "disk")], check=True)
        again = corpus(corpus_dir, tmp_path / "disk")
        again.prepare()
        assert again.cache_path == built.cache_path and len(again.train_tokens) == len(built.train_tokens)
    finally:
        subprocess.run(["umount", "-l", str(tmp_path / "disk")], capture_output=True)


# ---------------------------------------------------------------------------------------- (b) disk full


def test_a_full_disk_while_building_is_one_data_error_and_leaves_nothing(corpus_dir, tmp_path):
    with small_disk(tmp_path / "disk", "64k") as disk:
        with pytest.raises(
            DataError,
            match=r"^data\.cache_dir=.*disk ran out of space while building the token "
            r"cache \(No space left on device\); nothing of it was kept: free space "
            r"there or point data\.cache_dir at a folder with more room",
        ):
            corpus(corpus_dir, disk).prepare()
        assert list(disk.iterdir()) == []  # the build's scratch folder (and datasets' .arrow in it) is gone


@pytest.mark.parametrize("where", ["arrow", "shards", "tokenizer"])
def test_running_out_of_space_in_any_phase_of_a_build_is_the_same_line(corpus_dir, tmp_path, monkeypatch, where):
    """Without root: the errors each phase raises on a full disk (datasets wraps its OSError in a
    DatasetGenerationError; the tokenizers library raises a plain Exception naming os error 28)."""
    import datasets

    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if where == "arrow":

        def fail(*args, **kwargs):
            try:
                raise full
            except OSError as e:
                raise datasets.exceptions.DatasetGenerationError(
                    "An error occurred while generating the dataset"
                ) from e

        monkeypatch.setattr(datasets.Dataset, "from_generator", fail)
    elif where == "shards":
        monkeypatch.setattr(prepare_module, "_write_split", lambda *a, **k: (_ for _ in ()).throw(full))
    else:
        real = corpus_module.Corpus.make_tokenizer

        def tokenizer_that_cannot_save(self, sample):
            tokenizer = real(self, sample)

            class Unsaved:
                def __getattr__(self, name):
                    return getattr(tokenizer, name)

                def save(self, path):
                    raise Exception("No space left on device (os error 28)")

            return Unsaved()

        monkeypatch.setattr(corpus_module.Corpus, "make_tokenizer", tokenizer_that_cannot_save)
    with pytest.raises(DataError, match=r"ran out of space while building the token cache"):
        corpus(corpus_dir, tmp_path / "c").prepare()
    assert list((tmp_path / "c").iterdir()) == []


def test_a_full_datasets_cache_names_hf_datasets_cache(tmp_path, monkeypatch):
    import datasets

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(datasets, "load_dataset", full)
    with pytest.raises(
        DataError,
        match=r"could not load data\.hf_name=wikitext, split train: the datasets cache "
        r"ran out of space \(No space left on device\): free space in .* or set "
        r"HF_DATASETS_CACHE to a folder with more room",
    ):
        list(iter_hf_documents("wikitext"))


# ---------------------------------------------------------------------------------------- (c) the cache key


def _edit_keeping_size_and_mtime(path: Path) -> None:
    stat = path.stat()
    text = path.read_text()
    edited = text.replace("Document 0-0:", "Document 9-9:", 1)
    assert edited != text and len(edited) == len(text)
    path.write_text(edited)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns


def test_an_edit_keeping_size_and_mtime_reuses_the_cache_under_stat_and_is_rebuilt_under_full(tmp_path, caplog):
    folder = write_corpus(tmp_path / "corpus")
    caplog.set_level(logging.INFO, logger="selfsup")
    first = corpus(folder, tmp_path / "c")
    first.prepare()
    full = corpus(folder, tmp_path / "c", verify="full")
    full.prepare()
    assert full.cache_path != first.cache_path  # the key of a full read is the content's
    _edit_keeping_size_and_mtime(folder / "part0.jsonl")
    caplog.clear()
    stale = corpus(folder, tmp_path / "c")
    stale.prepare()
    assert stale.cache_path == first.cache_path  # the limit of data.verify=stat: said in one line
    [line] = [r.getMessage() for r in caplog.records if "reused token cache" in r.getMessage()]
    assert line == "reused token cache by file sizes+mtimes; data.verify=full hashes"  # 100 columns with Hydra's stamp
    fresh = corpus(folder, tmp_path / "c", verify="full")
    fresh.prepare()
    assert fresh.cache_path not in (first.cache_path, full.cache_path)
    assert "Document 9-9:" in fresh.tokenizer.decode(list(map(int, fresh.train_tokens[:]))) + fresh.tokenizer.decode(
        list(map(int, fresh.val_tokens[:]))
    )
    caplog.clear()
    again = corpus(folder, tmp_path / "c", verify="full")
    again.prepare()
    assert again.cache_path == fresh.cache_path
    [line] = [r.getMessage() for r in caplog.records if "reused token cache" in r.getMessage()]
    assert line == "reused token cache by file hashes (data.verify=full)"


def test_verify_stat_reads_no_file_and_verify_full_hashes_local_data_files(tmp_path, monkeypatch):
    folder = write_corpus(tmp_path / "corpus")
    hashed = []
    real = sources_module.file_digest
    monkeypatch.setattr(sources_module, "file_digest", lambda path: hashed.append(Path(path).name) or real(path))
    corpus(folder, tmp_path / "c").identity()
    assert hashed == []  # the warm start under stat: flat in the corpus size
    corpus(folder, tmp_path / "c", verify="full").identity()
    assert sorted(hashed) == [f"part{i}.jsonl" for i in range(4)]
    hashed.clear()
    Corpus(
        source="hf_dataset",
        hf_name="json",
        data_files=[str(folder / "part1.jsonl")],
        cache_dir=tmp_path / "c",
        verify="full",
    ).identity()
    assert hashed == ["part1.jsonl"]


def test_an_unknown_verify_is_refused(corpus_dir, tmp_path):
    with pytest.raises(
        DataError,
        match=r"^data\.verify='content' is unknown: use stat \(file paths, sizes and "
        r"modification times\) or full \(hash the files' contents\)",
    ):
        corpus(corpus_dir, tmp_path / "c", verify="content").prepare()


@pytest.mark.parametrize("revision", [None, "main", "0123456789abcdef0123456789abcdef01234567"])
def test_a_hub_data_set_on_a_moving_branch_warns_when_its_cache_is_reused(tmp_path, monkeypatch, caplog, revision):
    docs = [f"document {i} about the moving branch of a data set on the hub" for i in range(60)]
    monkeypatch.setattr(Corpus, "iter_documents", lambda self, split=None: iter(docs))

    def hub(**kw):
        return Corpus(
            source="hf_dataset",
            hf_name="someone/corpus",
            revision=revision,
            vocab_size=300,
            n_sentinels=4,
            cache_dir=tmp_path / "c",
            **kw,
        )

    hub().prepare()
    caplog.clear()
    hub().prepare()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if revision and len(revision) == 40:
        assert warnings == []
    else:
        [line] = warnings
        shown = revision or "null, its default branch"
        assert line.startswith(f"data.hf_name=someone/corpus is not pinned to a commit (data.revision={shown})")
        assert "its token cache is reused after the branch moves; set data.revision=<commit>" in line


def test_a_builder_with_local_files_gets_no_branch_warning(tmp_path, caplog):
    folder = write_corpus(tmp_path / "corpus", n_files=1)

    def make():
        return Corpus(
            source="hf_dataset",
            hf_name="json",
            data_files=[str(folder / "part0.jsonl")],
            vocab_size=300,
            n_sentinels=4,
            cache_dir=tmp_path / "c",
        )

    make().prepare()
    caplog.clear()
    caplog.set_level(logging.INFO, logger="selfsup")
    make().prepare()
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    said = [r.getMessage() for r in caplog.records if r.name == "selfsup"]
    assert said == ["reused token cache by file sizes+mtimes; data.verify=full hashes"]
