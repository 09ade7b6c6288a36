"""The hf_dataset source: documents of a data set loaded with `datasets.load_dataset`, each refusal in one line."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

from selfsup.data.sources import DataError, one_line, out_of_space


def iter_hf_documents(
    name: str | None,
    config: str | None = None,
    split: str = "train",
    text_field: str = "text",
    data_files=None,
    streaming: bool = False,
    max_documents: int | None = None,
    revision: str | None = None,
):
    """Documents from `datasets.load_dataset(name, config, split=split, streaming=streaming, data_files=...,
    revision=...)`, row by row (an Arrow-backed data set is memory-mapped, a streamed one read as it goes).

    Stops after `max_documents` non-empty documents (with streaming, nothing more is read).
    """
    if not name:
        raise DataError("data.hf_name is not set: name a data set (e.g. data.hf_name=wikitext) for data=hf_dataset")
    where = f"data.hf_name={name}" + (f" (config {config})" if config else "") + f", split {split}"
    dataset = load_hf(name, config, split, data_files, where, "data=hf_dataset", streaming=streaming, revision=revision)
    with quiet_datasets():  # a streamed data set is read (and may log) as it goes
        yield from _hf_rows(dataset, text_field, streaming, max_documents, where)


@contextlib.contextmanager
def quiet_datasets():
    """`datasets`' own log lines and progress bars off: its ERROR lines would precede the lab's one line."""
    import datasets

    verbosity, bars = datasets.logging.get_verbosity(), datasets.utils.logging.is_progress_bar_enabled()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.logging.set_verbosity(verbosity)
        if bars:
            datasets.enable_progress_bars()


def load_hf(name, config, split, data_files, where: str, needs: str, streaming=False, revision=None, error=DataError):
    """One split of `datasets.load_dataset(name, config, split=split, data_files=..., streaming=..., revision=...)`;
    a data set that does not load is refused in one line (an `error`) naming `where`, the settings that chose it;
    `needs`: what needs the datasets package."""
    try:  # datasets is imported here, not at the top: it and pyarrow take ~1 s, kept out of `import selfsup.data`
        import datasets
    except ImportError:
        raise error(f"{needs} needs the datasets package: pip install datasets") from None
    if isinstance(data_files, Mapping):  # plain containers: an OmegaConf one is not accepted by datasets
        data_files = {str(k): v if isinstance(v, str) else list(map(str, v)) for k, v in data_files.items()}
    elif data_files is not None and not isinstance(data_files, (str, os.PathLike)):
        data_files = list(map(str, data_files))
    try:
        with quiet_datasets():
            dataset = datasets.load_dataset(
                name, config, split=split, streaming=streaming, data_files=data_files, revision=revision
            )
    except Exception as e:  # noqa: BLE001 - load_dataset raises many kinds
        full = out_of_space(e)
        if full:  # load_dataset downloads and prepares into the datasets cache, not data.cache_dir
            raise error(
                f"could not load {where}: the datasets cache ran out of space ({full}): free space in "
                f"{datasets.config.HF_DATASETS_CACHE} or set HF_DATASETS_CACHE to a folder with more "
                f"room"
            ) from None
        cause = _root_cause(e)
        raise error(
            f"could not load {where}: {type(e).__name__}: {one_line(e)}"
            + ("" if cause.startswith(type(e).__name__ + ":") else f" (caused by {cause})")
            + ": check the name, config and split (and that the hub is reachable, or pass local data_files), "
            "and that local files are UTF-8 text in the builder's format"
        ) from None
    if not isinstance(dataset, (datasets.Dataset, datasets.IterableDataset)):
        raise error(f"{where} did not give one split ({type(dataset).__name__}): name a single split")
    return dataset


def _root_cause(e: BaseException) -> str:
    """'Type: message' of the innermost exception (datasets wraps a decoding error in its own)."""
    while True:  # the chain Python would print: a `raise ... from None` hides its context
        inner = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
        if inner is None:
            break
        e = inner
    return f"{type(e).__name__}: {one_line(e)}"


def _hf_rows(dataset, text_field, streaming, max_documents, where):
    columns = dataset.column_names  # None for some streaming data sets: then checked row by row
    if columns is not None and text_field not in columns:
        raise DataError(
            f"{where} has no column '{text_field}' (columns: {', '.join(columns[:10])}): set data.text_field"
        )
    if columns is not None and not streaming:
        dataset = dataset.select_columns([text_field])

    found = 0
    rows = iter(enumerate(dataset))
    while max_documents is None or found < max_documents:
        try:
            number, row = next(rows)
        except StopIteration:
            break
        except Exception as e:  # noqa: BLE001 - a streamed file is only decoded and parsed here
            raise DataError(
                f"could not read {where}: {_root_cause(e)}: check that the files are UTF-8 text in the builder's format"
            ) from None
        if text_field not in row:
            raise DataError(
                f"{where}: row {number} has no field '{text_field}' (fields: {', '.join(row)}): set data.text_field"
            )
        value = row[text_field]
        if value is not None and not isinstance(value, str):
            raise DataError(
                f"{where}: field '{text_field}' holds {type(value).__name__}, not strings: set data.text_field"
            )
        if value is not None and "\x00" in value:
            raise DataError(f"{where}: row {number} holds NUL bytes: the data looks binary, not text")
        if value is not None and value.strip():
            found += 1
            yield value
