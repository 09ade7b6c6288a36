"""The streaming token cache: the same tokens as a one-shot encode, warm starts that read nothing, shards,
damage, the tokenizer sample, a data set's own validation split, progress lines."""

from __future__ import annotations

import json

import numpy as np
import pytest

import selfsup.data.cache as cache_module
import selfsup.data.corpus as corpus_module
from selfsup.data import Corpus, ShardedTokens, encode_documents, split_documents, text_file_documents
from selfsup.data.sources import document_key


def write_corpus(folder, n_files=4, docs_per_file=60):
    folder.mkdir(parents=True, exist_ok=True)
    words = "the module returns a list of files in the folder and each file holds text about one subject".split()
    rng = np.random.default_rng(0)
    for f in range(n_files):
        with open(folder / f"part{f}.jsonl", "w") as out:
            for d in range(docs_per_file):
                text = " ".join(rng.choice(words, size=int(rng.integers(20, 120))))
                out.write(json.dumps({"text": f"Document {f}-{d}: {text}."}) + "\n")
    return folder


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"))


def corpus(folder, cache, **kw):
    return Corpus(source="text_files", paths=[folder], vocab_size=400, n_sentinels=8, cache_dir=cache, **kw)


def test_streamed_shards_hold_the_tokens_of_a_one_shot_encode(corpus_dir, tmp_path):
    """Slices of ~8,000 characters tokenized in two worker processes, written as shards: the same tokens as
    encoding every document of each split at once."""
    c = corpus(corpus_dir, tmp_path / "c", shard_chars=8_000, num_proc=2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cache_module, "PARALLEL_CHARS", 1)  # processes even for these small slices
        c.prepare()
    meta = c.meta
    assert len(meta["shards"]["train"]) >= 5 and len(c.train_tokens.paths) == len(meta["shards"]["train"])
    documents = text_file_documents([corpus_dir])
    train, val = split_documents(documents, c.val_fraction)
    assert np.array_equal(np.asarray(c.train_tokens), encode_documents(c.tokenizer, train, c.vocab.eos_id))
    assert np.array_equal(np.asarray(c.val_tokens), encode_documents(c.tokenizer, val, c.vocab.eos_id))
    assert meta["documents"] == {"train": len(train), "val": len(val)}
    assert all(text in c.training_keys for text in train) and not any(text in c.training_keys for text in val)


def test_sharded_tokens_slice_across_shard_boundaries(tmp_path):
    flat = np.arange(1000, dtype=np.uint16)
    paths = []
    for i, (a, b) in enumerate([(0, 300), (300, 300), (300, 710), (710, 1000)]):  # an empty shard too
        paths.append(tmp_path / f"s{i}.bin")
        flat[a:b].tofile(paths[-1])
    tokens = ShardedTokens(paths, "uint16")
    assert len(tokens) == 1000 and tokens[-1] == 999 and tokens[299] == 299
    for a, b in [(0, 1000), (290, 310), (299, 711), (705, 715), (999, 1000), (500, 500)]:
        assert np.array_equal(tokens[a:b], flat[a:b])
    import pickle
    again = pickle.loads(pickle.dumps(tokens))
    assert again._maps is None and np.array_equal(again[295:305], flat[295:305])


def test_a_warm_start_reads_no_document(corpus_dir, tmp_path, monkeypatch):
    reads = []
    real = corpus_module.iter_text_file_documents

    def counted(*args, **kwargs):
        for doc in real(*args, **kwargs):
            reads.append(doc)
            yield doc

    monkeypatch.setattr(corpus_module, "iter_text_file_documents", counted)
    first = corpus(corpus_dir, tmp_path / "c")
    first.prepare()
    assert len(reads) == 240
    reads.clear()
    again = corpus(corpus_dir, tmp_path / "c")
    again.prepare()
    assert reads == [] and again.cache_path == first.cache_path
    assert np.array_equal(np.asarray(again.train_tokens), np.asarray(first.train_tokens))
    (corpus_dir / "part0.jsonl").touch()  # the files' stats are the key: a touched file is another corpus
    other = corpus(corpus_dir, tmp_path / "c")
    other.prepare()
    assert other.cache_path != first.cache_path and len(reads) == 240


@pytest.mark.parametrize("damage", ["truncate", "other version"])
def test_a_truncated_shard_or_another_versions_cache_is_rebuilt(corpus_dir, tmp_path, damage, caplog):
    first = corpus(corpus_dir, tmp_path / "c", shard_chars=8_000)
    first.prepare()
    good = np.asarray(first.train_tokens)
    if damage == "truncate":
        shard = first.cache_path / "train-00001.bin"
        shard.write_bytes(shard.read_bytes()[:-2])
        expected = "train-00001.bin has"
    else:
        meta = first.cache_path / "meta.json"
        meta.write_text(meta.read_text().replace('"format_version": 3', '"format_version": 2'))
        expected = "it was written by another version of selfsup (format 2)"
    again = corpus(corpus_dir, tmp_path / "c", shard_chars=8_000)
    again.prepare()
    assert f"is damaged ({expected}" in caplog.text and "rebuilding it" in caplog.text
    assert np.array_equal(np.asarray(again.train_tokens), good)


def test_the_tokenizer_trains_on_a_bounded_sample_of_the_training_split(corpus_dir, tmp_path, monkeypatch):
    seen = []
    real = corpus_module.train_tokenizer

    def recording(sample, vocab_size, n_sentinels):
        sample = list(sample)
        seen.extend(sample)
        return real(sample, vocab_size, n_sentinels)

    monkeypatch.setattr(corpus_module, "train_tokenizer", recording)
    c = corpus(corpus_dir, tmp_path / "c", tokenizer_sample_chars=5_000)
    c.prepare()
    train, _ = split_documents(text_file_documents([corpus_dir]), c.val_fraction)
    assert seen == train[:len(seen)]  # the first training documents, in order
    assert sum(map(len, seen)) <= 5_000 < sum(map(len, train[:len(seen) + 1]))
    assert c.meta["identity"]["tokenizer_sample_chars"] == 5_000


def test_a_data_sets_own_validation_split_is_used(tmp_path):
    pytest.importorskip("datasets")
    files = write_corpus(tmp_path / "d", n_files=2, docs_per_file=40)
    c = Corpus(source="hf_dataset", hf_name="json", data_files={"train": str(files / "part0.jsonl"),
                                                                  "validation": str(files / "part1.jsonl")},
               val_split="validation", vocab_size=400, n_sentinels=8, cache_dir=tmp_path / "c")
    c.prepare()
    train, val = text_file_documents([files / "part0.jsonl"]), text_file_documents([files / "part1.jsonl"])
    assert c.meta["documents"] == {"train": 40, "val": 40}
    assert np.array_equal(np.asarray(c.val_tokens), encode_documents(c.tokenizer, val, c.vocab.eos_id))
    assert np.array_equal(np.asarray(c.train_tokens), encode_documents(c.tokenizer, train, c.vocab.eos_id))


def test_preparing_prints_progress_with_rates_and_one_summary_line(corpus_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cache_module.Progress, "every", 0.0)  # a line per shard (default: every 2 s)
    corpus(corpus_dir, tmp_path / "c", shard_chars=20_000).prepare()
    lines = capsys.readouterr().err.splitlines()
    progress = [line for line in lines if line.startswith("tokenizing text_files: ")]
    assert len(progress) >= 3 and all(" MB/s " in line and " documents/s " in line for line in progress)
    assert "(100%)" in progress[-1]
    [summary] = [line for line in lines if line.startswith("prepared text_files: ")]
    assert "240 documents ->" in summary and "MB/s)" in summary
    corpus(corpus_dir, tmp_path / "c", shard_chars=20_000).prepare()  # warm: silent
    assert capsys.readouterr().err == ""


def test_document_keys_keep_the_validation_buckets():
    from selfsup.data.sources import document_bucket
    for text in ("a", "the module", "x" * 1000):
        assert document_bucket(text) == document_key(text) % 10_000
