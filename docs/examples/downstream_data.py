"""The worked example's inputs (docs/downstream.md): a corpus of text files and three task files, written from the
Python standard library's documentation so that the page runs on any machine. With your own data, skip this: point
data.paths at your corpus and the task settings at your files.

    python docs/examples/downstream_data.py DIR

DIR/corpus/*.txt      pydoc's topics and the standard library's docstrings (the lab's built-in corpus), a file each
DIR/edit.jsonl        a 3-class task: a held-out docstring sentence as written, with two words swapped, or with one
                      word replaced ({"text", "label"}); each sentence once, none in the corpus
DIR/follows.jsonl     a sentence-pair task in GLUE's layout: does sentence2 follow sentence1 in the same docstring
                      ({"sentence1", "sentence2", "label"})
DIR/names.jsonl       a generation job: a docstring's first sentence -> the words of the name it documents
                      ({"source", "target"})
"""

import json
import sys
from pathlib import Path

from selfsup.data.builtin import builtin_documents
from selfsup.evaluation.builtin import builtin_examples, docstring_name_examples, next_sentence_examples


def write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{path}: {len(rows):,} records")


def main(folder: str) -> None:
    root = Path(folder)
    (root / "corpus").mkdir(parents=True, exist_ok=True)
    documents = builtin_documents()
    for i, text in enumerate(documents):
        (root / "corpus" / f"{i:05d}.txt").write_text(text)
    print(f"{root / 'corpus'}: {len(documents):,} files")
    swapped, replaced = builtin_examples("word_order", 2), builtin_examples("replaced_word", 1)
    edit = []
    for i in range(0, len(swapped), 2):  # each sentence once: as written, swapped or replaced, in turn
        kind = (i // 2) % 3
        text = swapped[i][0] if kind == 0 else (swapped if kind == 1 else replaced)[i + 1][0]
        edit.append({"text": text, "label": ["as written", "words swapped", "word replaced"][kind]})
    write(root / "edit.jsonl", edit)
    follows = [{"sentence1": a, "sentence2": b, "label": y} for (a, b), y, _, _ in next_sentence_examples()]
    write(root / "follows.jsonl", follows)
    write(root / "names.jsonl", [{"source": s, "target": t} for s, t, _ in docstring_name_examples()])


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "outputs/downstream-data")
