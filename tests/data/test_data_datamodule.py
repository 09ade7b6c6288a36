"""Corpus and SelfSupDataModule: token cache, windows, loaders, errors."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch

import selfsup.data.corpus as corpus_module
import selfsup.data.prepare as prepare_module
from selfsup.data import Corpus, DataError, ShardedTokens, Vocab, build_or_load_cache, cache_key
from selfsup.data.datamodule import SelfSupDataModule

VOCAB_SIZE = 512


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def builtin(cache_dir):
    dm = Corpus(vocab_size=VOCAB_SIZE, cache_dir=cache_dir, batch_size=4)
    dm.prepare()
    return dm


def test_prepare_builds_the_cache(builtin):
    vocab = builtin.vocab
    assert isinstance(vocab, Vocab) and vocab.size == VOCAB_SIZE and vocab.word_start.shape == (VOCAB_SIZE,)
    assert builtin.prepare() is vocab  # idempotent
    files = {p.name for p in builtin.cache_path.iterdir()}
    assert files == {"tokenizer.json", "train-00000.bin", "val-00000.bin", "train_keys.npy", "meta.json"}
    assert isinstance(builtin.train_tokens, ShardedTokens) and builtin.train_tokens.dtype == np.uint16
    meta = json.loads((builtin.cache_path / "meta.json").read_text())
    assert meta["tokens"] == {"train": len(builtin.train_tokens), "val": len(builtin.val_tokens)}
    assert meta["documents"]["train"] > 10 * meta["documents"]["val"] > 0
    assert meta["vocab_size"] == VOCAB_SIZE and meta["source"].startswith("builtin")
    assert builtin.cache_path.name == cache_key(meta["identity"])[:16]
    assert len(builtin.training_keys) == meta["documents"]["train"]
    # Each document ends with eos; eos only there (literal "</s>" in text is not eos).
    n_eos = int((np.asarray(builtin.train_tokens) == vocab.eos_id).sum())
    assert n_eos == meta["documents"]["train"] and builtin.train_tokens[-1] == vocab.eos_id
    assert int(np.asarray(builtin.train_tokens).max()) < vocab.size
    assert not list(builtin.cache_path.parent.glob(".building-*"))


def test_cache_is_reused_without_training_or_reading_a_document(builtin, cache_dir, monkeypatch):
    tokenizer_file = builtin.cache_path / "tokenizer.json"
    mtime = tokenizer_file.stat().st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError("the tokenizer was trained again")

    def no_reading(*args, **kwargs):
        raise AssertionError("a document was read")

    monkeypatch.setattr(corpus_module, "train_tokenizer", no_training)
    monkeypatch.setattr(corpus_module, "builtin_documents", no_reading)
    again = Corpus(vocab_size=VOCAB_SIZE, cache_dir=cache_dir)
    again.prepare()
    assert again.cache_path == builtin.cache_path
    assert tokenizer_file.stat().st_mtime_ns == mtime
    assert np.array_equal(again.train_tokens, builtin.train_tokens)
    assert torch.equal(again.vocab.word_start, builtin.vocab.word_start)


def test_other_settings_give_another_key(tmp_path):
    paths = [tmp_path / "a.txt", tmp_path / "b.txt"]
    paths[0].write_text("alpha beta gamma delta. " * 50)
    paths[1].write_text("one two three four five. " * 50)
    first = Corpus(source="text_files", paths=paths, vocab_size=400, cache_dir=tmp_path / "c")
    first.prepare()
    second = Corpus(source="text_files", paths=paths, vocab_size=420, cache_dir=tmp_path / "c")
    second.prepare()
    assert first.cache_path != second.cache_path
    paths[1].write_text("one two three four six. " * 50)  # changed content: new key
    third = Corpus(source="text_files", paths=paths, vocab_size=400, cache_dir=tmp_path / "c")
    third.prepare()
    assert third.cache_path not in (first.cache_path, second.cache_path)


def test_concurrent_build_keeps_the_first_copy(tmp_path, monkeypatch):
    docs = [f"Document {i} talks about subject {i % 5} at some length. " * 10 for i in range(30)]
    settings = dict(cache_dir=tmp_path, val_fraction=0.1, vocab_size=400, n_sentinels=10)
    real_build = prepare_module.build

    def build_while_another_process_finishes_first(folder, *args, **kwargs):
        real_build(folder, *args, **kwargs)
        monkeypatch.setattr(prepare_module, "build", real_build)
        other = build_or_load_cache(docs, **settings)  # the "other process" wins the rename
        assert other.built
        (other.path / "marker").write_text("first")

    monkeypatch.setattr(prepare_module, "build", build_while_another_process_finishes_first)
    ours = build_or_load_cache(docs, **settings)
    assert not ours.built and (ours.path / "marker").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == [ours.path.name]  # scratch folders cleaned up


def test_windows(builtin):
    length = 128
    builtin.set_window(length)
    for split, tokens in (("train", builtin.train_tokens), ("val", builtin.val_tokens)):
        windows = SelfSupDataModule(builtin)._windows(split)
        assert len(windows) == len(tokens) // length
        for i in (0, 1, len(windows) - 1):
            window = windows[i]
            assert window.dtype == torch.int64 and window.shape == (length,)
            assert torch.equal(
                window, torch.from_numpy(np.asarray(tokens[i * length : (i + 1) * length], dtype=np.int64))
            )
        with pytest.raises(IndexError):
            windows[len(windows)]


def test_windows_pickle_without_the_array(builtin):
    builtin.set_window(64)
    windows = SelfSupDataModule(builtin)._windows("train")
    clone = pickle.loads(pickle.dumps(windows))
    assert len(pickle.dumps(windows)) < 1000
    assert len(clone) == len(windows) and torch.equal(clone[5], windows[5])


def test_loaders(builtin):
    builtin.set_window(96, batches_per_step=3)
    train = SelfSupDataModule(builtin).train_dataloader()
    batch = next(iter(train))
    assert batch.shape == (4 * 3, 96) and batch.dtype == torch.int64
    assert len(train) == (len(builtin.train_tokens) // 96) // 12  # drop_last
    assert torch.equal(next(iter(SelfSupDataModule(builtin).train_dataloader())), batch)  # seeded shuffle
    val = SelfSupDataModule(builtin).val_dataloader()
    val_batches = list(val)
    assert all(b.shape[0] <= 4 for b in val_batches) and val_batches[0].shape == (4, 96)
    assert sum(b.shape[0] for b in val_batches) == len(builtin.val_tokens) // 96
    assert torch.equal(val_batches[0][0], SelfSupDataModule(builtin)._windows("val")[0])  # no shuffle


def test_loader_needs_a_window(cache_dir):
    dm = Corpus(vocab_size=VOCAB_SIZE, cache_dir=cache_dir)
    with pytest.raises(RuntimeError, match="set_window"):
        SelfSupDataModule(dm).train_dataloader()


def test_corpus_too_small_for_one_batch(builtin):
    n = len(builtin.train_tokens)
    with pytest.raises(
        DataError, match=r"corpus too small for one batch: \d+ training tokens give \d+ windows of"
    ) as e:
        builtin.set_window(n // 2)
    assert "lower data.batch_size or data.seq_len" in str(e.value)
    too_long_for_val = len(builtin.val_tokens) + 1
    assert (n // too_long_for_val) >= builtin.batch_size  # ... but enough for training
    with pytest.raises(DataError, match=r"validation split too small: \d+ validation tokens give 0 windows"):
        builtin.set_window(too_long_for_val)


def test_small_text_corpus_errors(tmp_path):
    (tmp_path / "a.txt").write_text("A short document. " * 20)
    (tmp_path / "b.txt").write_text("Another short one. " * 20)
    dm = Corpus(source="text_files", paths=[tmp_path], vocab_size=400, batch_size=2, cache_dir=tmp_path / "c")
    dm.prepare()
    with pytest.raises(DataError, match="corpus too small for one batch"):
        dm.set_window(64)
    dm.batch_size = 1
    dm.set_window(16)
    assert next(iter(SelfSupDataModule(dm).train_dataloader())).shape == (1, 16)


def test_one_token_documents_are_refused_and_nothing_is_cached(tmp_path):
    words = tmp_path / "words.jsonl"
    words.write_text("".join(json.dumps({"text": w}) + "\n" for w in ["cat", "dog", "sun"] * 200))
    settings = dict(source="text_files", paths=[words], vocab_size=400, n_sentinels=4, cache_dir=tmp_path / "c")
    with pytest.raises(DataError) as e:
        Corpus(**settings).prepare()
    assert str(e.value) == (
        f"text_files: {words}: each of its 400 training documents is a single token (such as 'cat'), so no "
        f"objective has context to learn from: put several words in each document (one document is a .txt file, "
        f"a .jsonl line, a .parquet row or a data set row)"
    )
    assert list((tmp_path / "c").iterdir()) == []  # no cache, no scratch folder left
    # a few documents with context are enough
    with words.open("a") as f:
        f.writelines(json.dumps({"text": f"the cat sat on mat {i}"}) + "\n" for i in range(5))
    dm = Corpus(**settings)
    dm.prepare()
    ends = np.flatnonzero(np.asarray(dm.train_tokens) == dm.vocab.eos_id)
    assert np.diff(ends, prepend=-1).max() - 1 > 1  # the longest document (eos not counted)


def test_setting_errors(tmp_path):
    with pytest.raises(DataError, match="builtin, text_files, hf_dataset"):
        Corpus(source="wiki", cache_dir=tmp_path).prepare()
    with pytest.raises(DataError, match=r"data.vocab_size=200 is too small"):
        Corpus(vocab_size=200, cache_dir=tmp_path).prepare()
    with pytest.raises(DataError, match="data.val_fraction"):
        Corpus(val_fraction=0.0, cache_dir=tmp_path).prepare()
    with pytest.raises(DataError, match="does not exist"):
        Corpus(source="text_files", paths=[tmp_path / "nope"], cache_dir=tmp_path).prepare()
    (tmp_path / "one.txt").write_text("Just one document.")
    with pytest.raises(DataError, match="at least 2"):
        Corpus(source="text_files", paths=[tmp_path / "one.txt"], cache_dir=tmp_path / "c").prepare()


def test_hf_dataset_source(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    path = tmp_path / "corpus.jsonl"
    path.write_text(
        "".join(json.dumps({"text": f"Document {i} is about topic {i % 7}. " * 5}) + "\n" for i in range(60))
    )
    for streaming in (False, True):
        dm = Corpus(
            source="hf_dataset", hf_name="json", data_files=str(path), streaming=streaming, max_documents=40,
            vocab_size=400, n_sentinels=10, val_fraction=0.2, batch_size=2, cache_dir=tmp_path / "c",
        )  # fmt: skip
        dm.prepare()
        assert sum(dm.meta["documents"].values()) == 40
        assert dm.meta["source"] == "hf_dataset: json [train]"
        dm.set_window(32)
        assert next(iter(SelfSupDataModule(dm).train_dataloader())).shape == (2, 32)


def test_lightning_hooks(cache_dir):
    dm = Corpus(vocab_size=VOCAB_SIZE, cache_dir=cache_dir, batch_size=2)
    SelfSupDataModule(dm).prepare_data()
    SelfSupDataModule(dm).setup("fit")
    dm.set_window(256)
    assert next(iter(SelfSupDataModule(dm).train_dataloader())).shape == (2, 256)


def test_sharded_sampler_ranks_are_disjoint_and_cover_the_split():
    from selfsup.data.datamodule import ShardedSampler

    for length in (100, 101):
        shares = [ShardedSampler(length, rank, 2, seed=3).indices() for rank in range(2)]
        assert len(shares[0]) == len(shares[1]) == length // 2  # same number of steps on every rank
        assert not set(shares[0]) & set(shares[1])
        covered = set(shares[0]) | set(shares[1])
        assert len(covered) == length - length % 2
        assert covered <= set(range(length))
    # validation: every window exactly once, even when the ranks get uneven shares
    val = [ShardedSampler(101, rank, 2, shuffle=False, even=False).indices() for rank in range(2)]
    assert sorted(val[0] + val[1]) == list(range(101))
    # a new epoch is a new order, the same on every rank
    a, b = ShardedSampler(100, 0, 2, seed=3), ShardedSampler(100, 0, 2, seed=3)
    b.set_epoch(1)
    assert a.indices() != b.indices()
