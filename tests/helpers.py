"""Corpora and tokenizers that tests in several folders build: `from helpers import ...` (tests/ is on sys.path
through tests/conftest.py)."""

import json

import numpy as np


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


def t5_like_tokenizer(path, texts, n_extra=10):
    """A SentencePiece-style Unigram tokenizer like T5's: <pad>=0, </s>=1, <unk>=2, then pieces, <extra_id_N> last."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(
        texts,
        trainers.UnigramTrainer(
            vocab_size=300, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False
        ),
    )
    tok.add_special_tokens([f"<extra_id_{i}>" for i in reversed(range(n_extra))])
    tok.save(str(path))
    return tok


def gpt2_like_tokenizer(path, texts):
    """A byte-level BPE like GPT-2's: no pad, mask or sentinels, <|endoftext|> its only special token (last)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        texts,
        trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False),
    )
    tok.add_special_tokens(["<|endoftext|>"])
    tok.save(str(path))
    return tok


def hf_checkpoint(kind, folder, texts, roles=(), **more):
    """A transformers model of `kind` (gpt2 | t5) with its own init and a tokenizer trained on `texts` (with the
    special tokens `roles` besides its own), saved in `folder` as a transformers folder with a tokenizer.json."""
    import torch
    import transformers

    tok = (gpt2_like_tokenizer if kind == "gpt2" else t5_like_tokenizer)(folder.with_suffix(".json"), texts)
    tok.add_special_tokens([r for r in roles if tok.token_to_id(r) is None and r != "</s>"])
    torch.manual_seed(0)
    if kind == "gpt2":
        eos = tok.token_to_id("<|endoftext|>")
        config = transformers.GPT2Config(
            vocab_size=tok.get_vocab_size(), n_embd=32, n_layer=2, n_head=4, n_positions=64,
            bos_token_id=eos, eos_token_id=eos, **more,
        )  # fmt: skip
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.T5Config(
            vocab_size=tok.get_vocab_size(), d_model=32, d_ff=48, d_kv=8, num_layers=2, num_heads=4,
            feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0, **more,
        )  # fmt: skip
        model = transformers.T5ForConditionalGeneration(config)
        model.config.tie_word_embeddings = False  # (transformers 5 ties T5's head whatever the config says)
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.lm_head.weight))
    model.save_pretrained(folder)
    tok.save(str(folder / "tokenizer.json"))
    return folder


def write_records(path, rows, fmt=None, row_group_size=None):
    """rows (dicts) as a .jsonl, .csv or .parquet file (fmt, else the path's suffix); returns str(path)."""
    import csv

    fmt = fmt or path.suffix[1:]
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "csv":
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return str(path)


def train_config(*overrides):
    """conf/train.yaml composed with `overrides`, as selfsup-train composes it (in-process)."""
    from hydra import compose, initialize_config_dir

    from selfsup.run.cli import CONF_DIR
    from selfsup.run.schema import register

    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return compose("train", overrides=list(overrides))
