"""The streaming token cache: the same tokens as a one-shot encode, warm starts that read nothing, shards,
damage, the tokenizer sample, a data set's own validation split, progress lines."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import gpt2_like_tokenizer, t5_like_tokenizer, write_corpus

import selfsup.data.cache as cache_module
import selfsup.data.corpus as corpus_module
import selfsup.data.prepare as prepare_module
from selfsup.data import FORMAT_VERSION, Corpus, ShardedTokens, encode_documents, split_documents, text_file_documents
from selfsup.data.sources import DataError, document_key


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
        mp.setattr(prepare_module, "PARALLEL_CHARS", 1)  # processes even for these small slices
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


@pytest.mark.parametrize("damage", ["truncate", "other version", "no manifest"])
def test_a_truncated_shard_or_another_versions_cache_is_rebuilt(corpus_dir, tmp_path, damage, caplog):
    first = corpus(corpus_dir, tmp_path / "c", shard_chars=8_000)
    first.prepare()
    good = np.asarray(first.train_tokens)
    if damage == "truncate":
        shard = first.cache_path / "train-00001.bin"
        shard.write_bytes(shard.read_bytes()[:-2])
        expected = "train-00001.bin has"
    elif damage == "other version":
        meta = first.cache_path / "meta.json"
        meta.write_text(meta.read_text().replace(f'"format_version": {FORMAT_VERSION}', '"format_version": 2'))
        expected = "it was written by another version of selfsup (format 2)"
    else:  # a folder left without its manifest
        (first.cache_path / "meta.json").unlink()
        expected = "meta.json is unreadable or records no files"
    again = corpus(corpus_dir, tmp_path / "c", shard_chars=8_000)
    again.prepare()
    assert f"is damaged ({expected}" in caplog.text and "rebuilding it" in caplog.text
    assert np.array_equal(np.asarray(again.train_tokens), good)


@pytest.mark.parametrize("value", [5, 65535])  # a valid id, and one past the vocabulary
def test_bytes_overwritten_in_a_shards_middle_stop_the_read_and_the_next_start_rebuilds(
    corpus_dir, tmp_path, monkeypatch, caplog, value
):
    """The warm start checks each shard's ends only (cheap); the middle is hashed per chunk as it is read."""
    monkeypatch.setattr(cache_module, "END_BYTES", 512)
    monkeypatch.setattr(cache_module, "CHUNK_BYTES", 512)
    first = corpus(corpus_dir, tmp_path / "c", shard_chars=8_000)
    first.prepare()
    good = {p.name: p.read_bytes() for p in first.cache_path.glob("*.bin")}
    shard = first.cache_path / "train-00001.bin"
    assert len(good[shard.name]) > 3 * 512
    data = np.fromfile(shard, dtype="<u2")
    data[300:310] = value  # bytes 600-620: in the second chunk, outside the first and last 512 bytes
    data.tofile(shard)
    again = corpus(corpus_dir, tmp_path / "c", shard_chars=8_000)
    again.prepare()
    assert "damaged" not in caplog.text and again.cache_path == first.cache_path  # the ends only: reused
    before = int(again.train_tokens.offsets[1])
    assert np.array_equal(again.train_tokens[:before], np.frombuffer(good["train-00000.bin"], "<u2"))  # intact
    with pytest.raises(
        DataError,
        match=r"token cache .* is damaged: train-00001\.bin bytes 512 to 1,024 do not "
        r"match their checksum .* the next start rebuilds",
    ):
        again.train_tokens[before + 250 : before + 260]  # tokens 250-260 of the shard: its second chunk
    assert (first.cache_path / "DAMAGED").is_file()
    rebuilt = corpus(corpus_dir, tmp_path / "c", shard_chars=8_000)
    rebuilt.prepare()
    assert "train-00001.bin bytes 512 to 1,024" in caplog.text and "rebuilding it" in caplog.text
    assert {p.name: p.read_bytes() for p in rebuilt.cache_path.glob("*.bin")} == good  # byte-identical
    assert not (rebuilt.cache_path / "DAMAGED").exists()
    assert len(np.asarray(rebuilt.train_tokens)) == sum(len(b) for n, b in good.items() if n.startswith("train")) // 2


def test_the_tokenizer_trains_on_a_bounded_sample_of_the_training_split(corpus_dir, tmp_path, monkeypatch):
    seen = []
    real = corpus_module.train_tokenizer

    def recording(sample, vocab_size, n_sentinels, fim=True):
        sample = list(sample)
        seen.extend(sample)
        return real(sample, vocab_size, n_sentinels, fim=fim)

    monkeypatch.setattr(corpus_module, "train_tokenizer", recording)
    c = corpus(corpus_dir, tmp_path / "c", tokenizer_sample_chars=5_000)
    c.prepare()
    train, _ = split_documents(text_file_documents([corpus_dir]), c.val_fraction)
    assert seen == train[: len(seen)]  # the first training documents, in order
    assert sum(map(len, seen)) <= 5_000 < sum(map(len, train[: len(seen) + 1]))
    assert c.meta["identity"]["tokenizer_sample_chars"] == 5_000


def test_a_data_sets_own_validation_split_is_used(tmp_path):
    pytest.importorskip("datasets")
    files = write_corpus(tmp_path / "d", n_files=2, docs_per_file=40)
    c = Corpus(
        source="hf_dataset",
        hf_name="json",
        data_files={"train": str(files / "part0.jsonl"), "validation": str(files / "part1.jsonl")},
        val_split="validation",
        vocab_size=400,
        n_sentinels=8,
        cache_dir=tmp_path / "c",
    )
    c.prepare()
    train, val = text_file_documents([files / "part0.jsonl"]), text_file_documents([files / "part1.jsonl"])
    assert c.meta["documents"] == {"train": 40, "val": 40}
    assert np.array_equal(np.asarray(c.val_tokens), encode_documents(c.tokenizer, val, c.vocab.eos_id))
    assert np.array_equal(np.asarray(c.train_tokens), encode_documents(c.tokenizer, train, c.vocab.eos_id))


def test_preparing_prints_progress_with_rates_and_one_summary_line(corpus_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(prepare_module.Progress, "every", 0.0)  # a line per shard (default: every 2 s)
    corpus(corpus_dir, tmp_path / "c", shard_chars=20_000).prepare()
    lines = capsys.readouterr().err.splitlines()
    progress = [line for line in lines if line.startswith("tokenizing: ")]
    assert len(progress) >= 3 and all(" MB/s " in line and " documents/s " in line for line in progress)
    assert "(100%)" in progress[-1]
    [summary] = [line for line in lines if line.startswith("prepared ")]
    assert ", 240 documents -> " in summary and summary.endswith(" MB/s") and len(summary) <= 100
    corpus(corpus_dir, tmp_path / "c", shard_chars=20_000).prepare()  # warm: silent
    assert capsys.readouterr().err == ""


def test_document_keys_keep_the_validation_buckets():
    from selfsup.data.sources import document_bucket

    for text in ("a", "the module", "x" * 1000):
        assert document_bucket(text) == document_key(text) % 10_000


@pytest.mark.parametrize("kind", ["t5", "gpt2", "starcoder"])
def test_a_pretrained_tokenizer_gets_the_labs_special_ids_and_segments_text_as_before(corpus_dir, tmp_path, kind):
    texts = text_file_documents([corpus_dir])
    path = tmp_path / f"{kind}.json"
    original = (t5_like_tokenizer if kind == "t5" else gpt2_like_tokenizer)(path, texts)
    if kind == "starcoder":  # a GPT-2 layout with StarCoder's fill-in-the-middle tokens
        original.add_special_tokens(["<fim_prefix>", "<fim_middle>", "<fim_suffix>"])
        original.save(str(path))
    c = Corpus(source="text_files", paths=[corpus_dir], tokenizer=str(path), n_sentinels=10, cache_dir=tmp_path / "c")
    v = c.prepare()
    tok = c.tokenizer
    # added: t5 lacks <s>, <mask>, the 3 mode tokens and the 3 FIM tokens; gpt2 has only </s> (<|endoftext|>) of the
    # 20; starcoder has the FIM tokens too, which keep their names and move to the lab's ids
    assert v.size == original.get_vocab_size() + {"t5": 8, "gpt2": 20 - 1, "starcoder": 20 - 4}[kind]
    assert v.fim and [tok.id_to_token(i) for i in v.fim_ids] == ["<fim_prefix>", "<fim_middle>", "<fim_suffix>"]
    eos = "</s>" if kind == "t5" else "<|endoftext|>"
    assert [tok.id_to_token(i) for i in (v.pad_id, v.eos_id, v.mask_id)] == ["<pad>", eos, "<mask>"]
    assert [tok.token_to_id(f"<extra_id_{i}>") for i in range(10)] == [v.sentinel(i) for i in range(10)]
    if kind == "t5":  # its own tokens were moved, not added
        assert original.token_to_id("<extra_id_0>") == original.get_vocab_size() - 1
    sentence = texts[0][:200]
    assert tok.encode(sentence).tokens == original.encode(sentence).tokens  # the same segmentation
    if kind == "gpt2":  # literal special strings stay text in the training data (docs/data.md: Unigram caveat)
        literal = sentence + " <mask> <s> <extra_id_0>"
        original.encode_special_tokens = tok.encode_special_tokens = True  # as the token cache encodes
        assert tok.encode(literal).tokens == original.encode(literal).tokens
        original.encode_special_tokens = tok.encode_special_tokens = False
    assert tok.decode(tok.encode(sentence).ids) == original.decode(original.encode(sentence).ids)
    assert int(np.asarray(c.train_tokens).max()) < v.size and c.meta["vocab_size"] == v.size


def test_a_pretrained_tokenizer_with_too_few_sentinels_is_refused(corpus_dir, tmp_path):
    from selfsup.data import DataError

    path = tmp_path / "t5.json"
    t5_like_tokenizer(path, text_file_documents([corpus_dir]), n_extra=5)
    with pytest.raises(
        DataError,
        match=r"has 5 sentinels \(<extra_id_0> \.\.\.\), data.n_sentinels=10 needs more than "
        r"it has room for: set data.n_sentinels=5 or fewer",
    ):
        Corpus(
            source="text_files", paths=[corpus_dir], tokenizer=str(path), n_sentinels=10, cache_dir=tmp_path / "c"
        ).prepare()
    with pytest.raises(DataError, match="data.tokenizer=nope/tokenizer.json does not exist"):
        Corpus(
            source="text_files", paths=[corpus_dir], tokenizer="nope/tokenizer.json", cache_dir=tmp_path / "c"
        ).prepare()


def test_a_hub_name_loads_the_tokenizer_from_the_hubs_local_cache(corpus_dir, tmp_path, monkeypatch):
    """data.tokenizer=<org/name>: the real huggingface_hub lookup, on a local hub cache (no network here)."""
    from selfsup.data import DataError
    from selfsup.data.pretrained_tokenizer import load_pretrained

    commit = "0" * 40
    snapshot = tmp_path / "hub" / "models--lab--t5-like" / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (tmp_path / "hub" / "models--lab--t5-like" / "refs").mkdir()
    (tmp_path / "hub" / "models--lab--t5-like" / "refs" / "main").write_text(commit)
    original = t5_like_tokenizer(snapshot / "tokenizer.json", text_file_documents([corpus_dir]))
    loaded = load_pretrained("lab/t5-like", hub_cache=str(tmp_path / "hub"))
    assert loaded.get_vocab() == original.get_vocab()
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DataError, match="data.tokenizer=lab/other: not in the local hub cache, and HF_HUB_OFFLINE"):
        load_pretrained("lab/other", hub_cache=str(tmp_path / "hub"))


def test_a_data_set_without_text_is_one_line_and_leaves_no_cache(tmp_path):
    from selfsup.data import DataError

    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"text": ""}\n{"text": "  "}\n')
    with pytest.raises(DataError, match=r"^hf_dataset: json \[train\] gave no documents with text: check its settings"):
        Corpus(
            source="hf_dataset",
            hf_name="json",
            data_files=[str(empty)],
            vocab_size=400,
            n_sentinels=4,
            cache_dir=tmp_path / "c",
        ).prepare()
    assert list((tmp_path / "c").iterdir()) == []


def test_a_long_txt_file_is_read_in_blocks_into_the_same_documents(tmp_path):
    """A .txt file streamed a few KiB at a time (multi-byte characters across block ends) gives the pieces
    split_long_text cuts the whole text into; bad bytes far into the file are reported at their offset."""
    from selfsup.data import DataError
    from selfsup.data.sources import _txt_documents, drop_empty, split_long_text

    rng = np.random.default_rng(1)
    words = ["café", "naïve", "€uro", "line\n", "para\n\n", "x" * 50, "module"]
    text = " ".join(rng.choice(words, size=60_000))
    path = tmp_path / "long.txt"
    path.write_text(text, encoding="utf-8")
    expected = drop_empty(split_long_text(text, 20_000))
    assert len(expected) > 10
    assert list(_txt_documents(path, limit=20_000, block_bytes=4099)) == expected
    data = text.encode("utf-8")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(data[:100_001] + b"\xff" + data[100_001:])
    with pytest.raises(DataError, match=r"is not UTF-8 text \(invalid byte at offset 100001\)"):
        list(_txt_documents(bad, limit=20_000, block_bytes=4099))
    binary = tmp_path / "binary.txt"
    binary.write_bytes(data[:50_000] + b"\x00" + data[50_000:])
    with pytest.raises(DataError, match="looks binary"):
        list(_txt_documents(binary, block_bytes=4099))
    blank = tmp_path / "blank.txt"
    blank.write_text(" \n\n " * 10_000)
    with pytest.raises(DataError, match="is empty"):
        list(_txt_documents(blank, block_bytes=4099))


def test_the_key_follows_every_local_file_a_setting_names(tmp_path):
    """data_files as a dict, a glob or with ~; a local data set folder as hf_name; a tokenizer folder: changing a
    file they name changes the key (the cache is never reused for other text)."""
    import os
    import time

    from selfsup.data import cache_key

    folder = tmp_path / "d"
    folder.mkdir()
    file = folder / "a.jsonl"
    (tmp_path / "tok").mkdir()
    corpora = [
        Corpus(source="hf_dataset", hf_name="json", data_files={"train": str(file)}),
        Corpus(source="hf_dataset", hf_name="json", data_files=[str(folder / "*.jsonl")]),
        Corpus(source="hf_dataset", hf_name="json", data_files=[str(file).replace(os.path.expanduser("~"), "~", 1)]),
        Corpus(source="hf_dataset", hf_name=str(folder)),
        Corpus(source="builtin", tokenizer=str(tmp_path / "tok")),
    ]
    file.write_text('{"text": "one two"}\n')
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    before = [cache_key(c.identity()) for c in corpora]
    time.sleep(0.01)
    file.write_text('{"text": "one two three"}\n')
    (tmp_path / "tok" / "tokenizer.json").write_text("{ }")
    after = [cache_key(c.identity()) for c in corpora]
    assert all(a != b for a, b in zip(before, after))


def test_wordpiece_word_starts_are_the_tokens_without_its_continuation_prefix():
    from tokenizers import Tokenizer, models

    from selfsup.data import vocab_from_tokenizer
    from selfsup.data.vocab import special_tokens

    names = special_tokens(2) + ["the", "##s", "module", "##ing", "[UNK]"]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(names)}, unk_token="[UNK]"))
    v = vocab_from_tokenizer(tok, 2)
    assert [bool(v.word_start[names.index(t)]) for t in ("the", "##s", "module", "##ing")] == [True, False, True, False]


def test_the_scratch_of_a_build_killed_a_day_ago_is_swept_by_the_next_build(corpus_dir, tmp_path):
    import os
    import time

    cache = tmp_path / "c"
    old, fresh = cache / ".building-0123456789abcdef-dead", cache / ".building-fedcba9876543210-busy"
    for folder in (old, fresh):
        folder.mkdir(parents=True)
        (folder / "train-00000.bin").write_bytes(b"\0" * 10)
    os.utime(old, (time.time() - 2 * 24 * 3600,) * 2)
    corpus(corpus_dir, cache).prepare()
    assert not old.exists() and fresh.exists()  # another build may still be writing a recent one
