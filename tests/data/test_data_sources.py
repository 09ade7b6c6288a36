"""Text sources and the train / validation split."""

from __future__ import annotations

import json
import re

import pytest

from selfsup.data import (
    DataError,
    builtin_documents,
    document_bucket,
    split_documents,
    text_file_documents,
)
from selfsup.data.hf_dataset import iter_hf_documents
from selfsup.data.sources import MAX_TXT_DOCUMENT_CHARS, split_long_text


@pytest.fixture(scope="module")
def builtin():
    return builtin_documents()


# ---- builtin ---------------------------------------------------------------------------------


def test_builtin_is_many_documents_of_english(builtin):
    assert len(builtin) >= 200
    total = sum(map(len, builtin))
    assert 500_000 < total <= 3_000_000
    words = re.findall(r"[a-z]+", " ".join(builtin).lower())
    share = sum(w in {"the", "of", "a", "to", "is", "and", "in"} for w in words) / len(words)
    assert share > 0.1, "common English words should be frequent"
    assert any("if_stmt" in d or 'The "if" statement' in d for d in builtin)  # a pydoc topic
    assert any("Return a new list" in d or "Return the" in d for d in builtin)  # a docstring
    assert all(d.strip() for d in builtin)
    assert len(set(builtin)) == len(builtin)


def test_builtin_is_deterministic(builtin):
    assert builtin_documents() == builtin


def test_builtin_cap():
    docs = builtin_documents(max_chars=100_000)
    assert 0 < sum(map(len, docs)) <= 100_000


# ---- split -----------------------------------------------------------------------------------


def test_split_is_deterministic_disjoint_and_by_document(builtin):
    train, val = split_documents(builtin, 0.05)
    assert (train, val) == split_documents(builtin, 0.05)
    assert len(train) + len(val) == len(builtin)
    assert not set(train) & set(val)
    assert set(train) | set(val) == set(builtin)
    assert 0 < len(val) < len(builtin) * 0.2
    assert all(document_bucket(d) < 500 for d in val)
    assert all(document_bucket(d) >= 500 for d in train)
    # Order and membership do not depend on the other documents.
    train2, val2 = split_documents(list(reversed(builtin)), 0.05)
    assert set(val2) == set(val) and val2 == list(reversed(val))


def test_split_keeps_both_sides_non_empty():
    docs = [f"document {i}" for i in range(3)]
    train, val = split_documents(docs, 1e-6)
    assert len(val) == 1 and len(train) == 2
    assert val[0] == min(docs, key=document_bucket)
    train, val = split_documents(docs, 0.999999)
    assert len(train) >= 1 and len(val) >= 1
    train, val = split_documents(["a", "b"], 0.5)
    assert len(train) == len(val) == 1


def test_split_needs_two_documents():
    with pytest.raises(DataError, match="at least 2"):
        split_documents(["only one"], 0.05)


# ---- text files ------------------------------------------------------------------------------


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_txt_jsonl_and_folders(tmp_path):
    (tmp_path / "b.txt").write_text("Second file.\n")
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "a.txt").write_text("First file, in a folder.\n")
    (sub / "notes.md").write_text("ignored: unsupported files inside folders are skipped")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.txt").write_text("hidden folders are skipped")
    write_jsonl(tmp_path / "c.jsonl", [{"text": "one"}, {"text": "  "}, {"text": "two", "id": 2}])
    docs = text_file_documents([tmp_path])
    assert docs == ["Second file.\n", "one", "two", "First file, in a folder.\n"]  # sorted paths, empties dropped
    assert text_file_documents(str(tmp_path / "b.txt")) == ["Second file.\n"]
    write_jsonl(tmp_path / "body.jsonl", [{"body": "x y z"}])
    assert text_file_documents([tmp_path / "body.jsonl"], text_field="body") == ["x y z"]


def test_big_txt_file_is_cut_at_blank_lines(tmp_path):
    paragraphs = [f"Paragraph {i}. " + "word " * 200 for i in range(400)]
    text = "\n\n".join(paragraphs)
    (tmp_path / "big.txt").write_text(text)
    docs = text_file_documents([tmp_path / "big.txt"])
    assert len(docs) > 1
    assert "".join(docs) == text
    assert all(len(d) <= MAX_TXT_DOCUMENT_CHARS for d in docs)
    assert all(d.startswith("Paragraph") for d in docs)
    assert split_long_text("x" * 25, limit=10) == ["x" * 10, "x" * 10, "x" * 5]


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"text": ["alpha beta", None, "", "gamma"], "n": [1, 2, 3, 4]}), tmp_path / "t.parquet")
    assert text_file_documents([tmp_path / "t.parquet"]) == ["alpha beta", "gamma"]
    with pytest.raises(DataError, match=r"t\.parquet: no column 'body' \(columns: text, n\)"):
        text_file_documents([tmp_path / "t.parquet"], text_field="body")
    with pytest.raises(DataError, match=r"column 'n' holds int64, not strings"):
        text_file_documents([tmp_path / "t.parquet"], text_field="n")
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(DataError, match=r"bad\.parquet is not a readable parquet file"):
        text_file_documents([tmp_path / "bad.parquet"])


def one_line(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message
    return message


def test_text_file_errors(tmp_path):
    missing = tmp_path / "missing.txt"
    with pytest.raises(DataError, match="does not exist") as e:
        text_file_documents([missing])
    assert str(missing) in one_line(e) and "data.paths" in one_line(e)

    with pytest.raises(DataError, match="data.paths is empty"):
        text_file_documents([])

    empty_dir = tmp_path / "empty_dir"
    empty_dir.mkdir()
    (empty_dir / "readme.md").write_text("not supported")
    with pytest.raises(DataError, match="holds no .txt, .jsonl or .parquet files") as e:
        text_file_documents([empty_dir])
    assert str(empty_dir) in one_line(e)

    (tmp_path / "empty.txt").write_text("  \n\n ")
    with pytest.raises(DataError, match=r"empty\.txt is empty"):
        text_file_documents([tmp_path / "empty.txt"])

    (tmp_path / "blob.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    with pytest.raises(DataError, match=r"blob\.txt looks binary"):
        text_file_documents([tmp_path / "blob.txt"])

    (tmp_path / "latin1.txt").write_bytes("café crème".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin1\.txt is not UTF-8 text"):
        text_file_documents([tmp_path / "latin1.txt"])

    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(DataError, match=r"data\.csv has unsupported extension '\.csv'"):
        text_file_documents([tmp_path / "data.csv"])


def test_jsonl_errors_name_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{not json}\n')
    with pytest.raises(DataError, match=r"bad\.jsonl:2: not valid JSON") as e:
        text_file_documents([bad])
    one_line(e)

    nofield = write_jsonl(tmp_path / "nofield.jsonl", [{"text": "ok"}, {"text": "ok"}, {"body": "no text field"}])
    with pytest.raises(DataError, match=r"nofield\.jsonl:3: no field 'text' \(fields: body\): set data.text_field"):
        text_file_documents([nofield])

    wrong_type = write_jsonl(tmp_path / "num.jsonl", [{"text": 5}])
    with pytest.raises(DataError, match=r"num\.jsonl:1: field 'text' is a JSON int"):
        text_file_documents([wrong_type])

    array = tmp_path / "array.jsonl"
    array.write_text("[1, 2]\n")
    with pytest.raises(DataError, match=r"array\.jsonl:1: a JSON list, not an object"):
        text_file_documents([array])

    blank = write_jsonl(tmp_path / "blank.jsonl", [{"text": ""}, {"text": None}])
    with pytest.raises(DataError, match=r"blank\.jsonl has no text"):
        text_file_documents([blank])


# ---- Hugging Face datasets (local files: the hub is not reachable from tests) ----------------


@pytest.fixture
def hf_local(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"text": f"document number {i}.", "id": i} for i in range(20)])
    return str(path)


def test_hf_dataset_from_local_json(hf_local):
    docs = list(iter_hf_documents("json", data_files=hf_local))
    assert docs == [f"document number {i}." for i in range(20)]
    assert list(iter_hf_documents("json", data_files=hf_local, max_documents=3)) == docs[:3]


def test_hf_dataset_streaming(hf_local):
    docs = list(iter_hf_documents("json", data_files=hf_local, streaming=True, max_documents=5))
    assert docs == [f"document number {i}." for i in range(5)]
    assert len(list(iter_hf_documents("json", data_files=hf_local, streaming=True))) == 20


def test_hf_dataset_errors(hf_local, tmp_path):
    for streaming in (False, True):
        with pytest.raises(DataError, match=r"no column 'body' \(columns: text, id\): set data.text_field"):
            list(iter_hf_documents("json", data_files=hf_local, text_field="body", streaming=streaming))
    missing = str(tmp_path / "no_such_dataset")
    with pytest.raises(DataError, match=r"could not load data.hf_name=.*no_such_dataset") as e:
        list(iter_hf_documents(missing))
    one_line(e)
    with pytest.raises(DataError, match="data.hf_name is not set"):
        list(iter_hf_documents(None))


@pytest.mark.parametrize("streaming", [False, True])
def test_hf_dataset_bad_local_files(hf_local, tmp_path, streaming):
    """Non-UTF-8, malformed and binary files: one line naming the cause (streaming reads them late)."""
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1") * 50)
    with pytest.raises(DataError, match="UnicodeDecodeError") as e:
        list(iter_hf_documents("text", data_files=str(latin), streaming=streaming))
    one_line(e)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "fine"}\nnot json\n')
    with pytest.raises(DataError, match="data.hf_name=json") as e:
        list(iter_hf_documents("json", data_files=str(broken), streaming=streaming))
    one_line(e)
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"text\x00with\x00nul\n" * 50)
    with pytest.raises(DataError, match="row 0 holds NUL bytes"):
        list(iter_hf_documents("text", data_files=str(binary), streaming=streaming))


def test_a_fifo_is_refused_instead_of_read_for_ever(tmp_path):
    import os

    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match="is not a regular file"):
        text_file_documents([fifo])


def test_empty_files_in_a_folder_are_skipped_with_one_warning_and_a_named_empty_file_is_refused(tmp_path, capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("A document about modules.\n\nAnother about files.\n")
    (folder / "empty1.txt").write_text("")
    (folder / "empty2.jsonl").write_text("")
    assert text_file_documents([folder]) == ["A document about modules.\n\nAnother about files.\n"]
    warning = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert warning == [f"warning: data.paths: 2 empty files in folder {folder} skipped (e.g. empty1.txt)"]
    with pytest.raises(DataError, match="empty1.txt is empty: add text to it or remove it from data.paths"):
        text_file_documents([folder / "empty1.txt"])
    (folder / "a.txt").write_text("")
    with pytest.raises(DataError, match=f"every file in folder {folder} is empty"):
        text_file_documents([folder])
