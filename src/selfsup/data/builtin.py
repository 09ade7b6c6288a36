"""The builtin source: English prose that ships with Python (pydoc topics + standard-library docstrings).

`builtin_documents()` gives the documents. This file imports only the standard library at the top:
it is also run as a script, in a clean interpreter, to gather the standard-library docstrings
(see `_stdlib_docstrings`).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import inspect
import io
import json
import os
import pkgutil
import subprocess
import sys
import warnings
from collections.abc import Iterable
from pathlib import Path
from pydoc_data.topics import topics

BUILTIN_MAX_CHARS = 3_000_000  # cap on the builtin corpus, so tokenizing stays fast
BUILTIN_MIN_DOCSTRING_CHARS = 200

# Never imported: side effects on import (open a browser, print, start Tk, rewrite files) or tests.
_BUILTIN_SKIP = {
    "antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test", "tests",
    "lib2to3", "readline", "rlcompleter", "site", "msilib", "pydoc_data",
    "xxlimited", "xxlimited_35", "xxsubtype",
}  # fmt: skip


def _skip_module(name: str) -> bool:
    return any(
        part in _BUILTIN_SKIP or part.startswith("_") or part.startswith("test") or part.startswith("turtle")
        for part in name.split(".")
    )


def _stdlib_docstrings() -> dict:
    """{"modules": [(module name, text)], "held_out": [text], "held_out_names": [name]} from every importable
    standard-library module.

    The text of a module is its docstring plus those of its public classes, functions and methods
    that are at least BUILTIN_MIN_DOCSTRING_CHARS long, each once (deduplicated), joined by blank
    lines. Modules in sorted order, packages walked recursively. "held_out" are the docstrings no
    module text holds (of private members, or shorter): the built-in probe task's text, which the
    built-in pretraining corpus never contains; "held_out_names" the name each documents (the member's name as
    its class or module holds it, a module's last dotted part), the first where a text documents several. Meant to run in a fresh interpreter
    (`python -I -S builtin.py --stdlib-docstrings`), so imports cannot disturb the caller.
    """

    def modules() -> Iterable:
        pending = sorted(n for n in sys.stdlib_module_names if not _skip_module(n))
        while pending:
            name = pending.pop(0)
            try:
                module = importlib.import_module(name)
            except BaseException:  # noqa: BLE001 - any failure (ImportError, SystemExit, ...) skips it
                continue
            yield module
            if hasattr(module, "__path__"):
                children = sorted(f"{name}.{m.name}" for m in pkgutil.iter_modules(module.__path__))
                pending[:0] = [c for c in children if not _skip_module(c)]

    seen: set[str] = set()
    held_out: dict[str, str] = {}  # text -> the name it documents

    def doc_of(obj: object, name: str, public: bool = True) -> str | None:
        raw = getattr(obj, "__doc__", None)
        if not isinstance(raw, str):
            return None
        text = inspect.cleandoc(raw)
        if not public or len(text) < BUILTIN_MIN_DOCSTRING_CHARS:
            held_out.setdefault(text, name)
            return None
        if text in seen:
            return None
        seen.add(text)
        return text

    out: list[tuple[str, str]] = []
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        warnings.simplefilter("ignore")
        for module in modules():
            parts = [doc_of(module, module.__name__.rpartition(".")[2])]
            namespace = vars(module)
            for attr in sorted(namespace):
                obj = namespace[attr]
                if getattr(obj, "__module__", None) != module.__name__:
                    continue
                public = not attr.startswith("_")
                if inspect.isroutine(obj):
                    parts.append(doc_of(obj, attr, public))
                elif inspect.isclass(obj):
                    parts.append(doc_of(obj, attr, public))
                    members = vars(obj)
                    parts += [doc_of(members[m], m, public and not m.startswith("_")) for m in sorted(members)]
            text = "\n\n".join(p for p in parts if p)
            if text:
                out.append((module.__name__, text))
    kept = [t for t in held_out if t not in seen]
    return {"modules": out, "held_out": kept, "held_out_names": [held_out[t] for t in kept]}


_GATHERED: dict = {}
GATHERED_FORMAT = 2  # in the cache file's name: a cache of another format is not read


def stdlib_docstrings(cache_dir: str | os.PathLike | None = None) -> dict:
    """`_stdlib_docstrings()`, gathered once per Python installation in a fresh, isolated interpreter (`-I -S`:
    no environment variables, current directory or site-packages, so neither installed packages nor anything
    the caller imported can change them); kept for the process, and in cache_dir when given (a JSON file
    named after the interpreter), so that later runs read it instead of importing the standard library."""
    if _GATHERED:
        return _GATHERED
    kept = None
    if cache_dir is not None:
        identity = f"{sys.version}|{sys.executable}|{Path(os.__file__).resolve()}"
        kept = (
            Path(cache_dir).expanduser()
            / f"stdlib-docstrings-{GATHERED_FORMAT}-{hashlib.blake2b(identity.encode(), digest_size=8).hexdigest()}.json"
        )
        if kept.is_file():
            try:
                _GATHERED.update(json.loads(kept.read_text()))
                return _GATHERED
            except (OSError, ValueError):
                pass  # damaged: gathered again below
    _GATHERED.update(_gather())
    if kept is not None:
        tmp = kept.with_name(f".{kept.name}.{os.getpid()}.tmp")
        try:  # atomically: a concurrent run reads a whole file or none
            kept.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(_GATHERED))
            os.replace(tmp, kept)
        except OSError:  # an unwritable or full cache dir: gathered again next time
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
    return _GATHERED


def _gather() -> dict:
    # Imported here, not at the top: run as a script (below), this file has no selfsup to import.
    from selfsup.data.sources import DataError, one_line

    if sys.executable:
        command = [sys.executable, "-I", "-S", str(Path(__file__).resolve()), "--stdlib-docstrings"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as e:
            raise DataError(f"data=builtin: could not gather standard-library docstrings: {one_line(e)}") from e
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no error output"])[-1]
            raise DataError(f"data=builtin: gathering standard-library docstrings failed: {one_line(tail)}")
        return json.loads(done.stdout)
    return _stdlib_docstrings()  # embedded interpreter with no executable to start: gather here


def builtin_documents(max_chars: int = BUILTIN_MAX_CHARS, cache_dir: str | os.PathLike | None = None) -> list[str]:
    """Every `pydoc_data.topics` topic, then standard-library docstrings (one document per module).

    Deterministic for a given Python installation (see `stdlib_docstrings`), in sorted order.
    """
    # Imported here, not at the top: run as a script (below), this file has no selfsup to import.
    from selfsup.data.sources import drop_empty

    documents = [topics[name] for name in sorted(topics)]
    documents += [text for _, text in stdlib_docstrings(cache_dir)["modules"]]

    kept, total = [], 0
    for doc in dict.fromkeys(drop_empty(documents)):  # some pydoc topics are the same text
        if total + len(doc) > max_chars:
            break
        kept.append(doc)
        total += len(doc)
    return kept


if __name__ == "__main__" and sys.argv[1:] == ["--stdlib-docstrings"]:
    # Keep the real stdout / stderr for the answer: modules that print on import cannot corrupt it.
    answer, errors = os.fdopen(os.dup(1), "w"), os.fdopen(os.dup(2), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        json.dump(_stdlib_docstrings(), answer)  # ASCII (json escapes the rest): no locale issues
        answer.flush()
    except BaseException as e:  # noqa: BLE001
        errors.write(f"{type(e).__name__}: {e}\n")
        errors.flush()
        os._exit(1)
    os._exit(0)  # skip tearing down hundreds of modules (atexit hooks, threads)
