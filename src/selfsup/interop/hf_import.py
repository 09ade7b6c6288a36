"""Models in: a transformers checkpoint of a class `selfsup-export` writes, as the lab's model.

    config, model = import_model("gpt2-folder/")   # a local transformers folder, or a hub name

The mapping is the export's, run backwards. The lab model that the checkpoint's config describes is built; the
exporter names, for every transformers tensor, the lab tensor or view of one it writes there (a transpose, a slice
of the joint query-key-value projection, the real rows of the padded vocabulary); the checkpoint's tensors are
copied into those views. Then the export of the result is compared with the checkpoint, setting by setting and
tensor by tensor: what the lab's model cannot hold (an activation it lacks, a tied T5 head, BERT's token types, a head
transform that is not the export's identity, a bias where the checkpoint has some and the lab none) is refused in
one line naming it. An import that succeeds exports back exactly.

A run starts from a checkpoint with `selfsup-train init.from=<folder | hub name>` (selfsup.run.build.with_init): the
checkpoint's settings become the run's architecture, its tokenizer (renumbered to the lab's layout) the run's, and
`start_from` moves its weights into the run's model, each token's row from its old id to its new one.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import asdict
from types import SimpleNamespace

import torch
from tokenizers import Tokenizer

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.data.pretrained_tokenizer import load_pretrained
from selfsup.errors import UserError
from selfsup.interop.export import EXPORTERS, HF_CLASSES, T5_SETTINGS, exporter
from selfsup.models import TransformerConfig

# per class the export writes: the lab's TransformerConfig setting <- the transformers config attribute
SETTINGS = {
    DECODER: dict(
        d_model="n_embd",
        n_layers="n_layer",
        n_heads="n_head",
        d_ff="n_inner",
        activation="activation_function",
        dropout="resid_pdrop",
    ),
    ENCODER: dict(
        d_model="hidden_size",
        n_layers="num_hidden_layers",
        n_heads="num_attention_heads",
        d_ff="intermediate_size",
        activation="hidden_act",
        dropout="hidden_dropout_prob",
    ),
    ENCODER_DECODER: dict(
        d_model="d_model",
        n_layers="encoder_layers",
        n_decoder_layers="decoder_layers",
        n_heads="encoder_attention_heads",
        d_ff="encoder_ffn_dim",
        activation="activation_function",
        dropout="dropout",
    ),
    "t5": dict(
        d_model="d_model",
        n_layers="num_layers",
        n_decoder_layers="num_decoder_layers",
        n_heads="num_heads",
        d_ff="d_ff",
        activation="feed_forward_proj",
        dropout="dropout_rate",
        relative_buckets="relative_attention_num_buckets",
        relative_max_distance="relative_attention_max_distance",
    ),
}


def _settings(kind: str, c) -> dict:
    """The lab's TransformerConfig settings that a transformers config of the export's class `kind` describes."""
    found = {key: getattr(c, attribute) for key, attribute in SETTINGS[kind].items()}
    if kind == "t5":
        return {**found, "name": ENCODER_DECODER, **T5_SETTINGS, "init": "t5"}
    return {**found, "name": kind}


# the export's config keys that name tokens or the class, not what the model computes (tie_word_embeddings:
# transformers 5's T5Config says True whatever it loads; the tensors are compared instead)
NOT_COMPUTED = {
    "architectures",
    "model_type",
    "torch_dtype",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "decoder_start_token_id",
    "forced_eos_token_id",
    "tie_word_embeddings",
}


def import_model(source: str, max_len: int = 512) -> tuple[TransformerConfig, torch.nn.Module]:
    """The lab's architecture settings and model holding the weights of a transformers checkpoint (a folder or a
    hub name) of a class the export writes; max_len: positions of a class without a table of them (T5)."""
    import transformers  # the `bench` extra: only an import needs it
    from safetensors import SafetensorError

    try:
        hf = _load(transformers, source)
    except OSError as err:
        raise UserError(f"init.from={source}: {str(err).splitlines()[0]}") from None
    except SafetensorError as err:  # a truncated, empty or damaged model.safetensors
        raise UserError(
            f"init.from={source}: its weights cannot be read ({str(err).splitlines()[0]}): the file is damaged or "
            f"incomplete; save the model again (model.save_pretrained)"
        ) from None
    name = type(hf).__name__
    kinds = {cls: kind for kind, (_, cls, _) in HF_CLASSES.items()}
    if name not in kinds:
        raise UserError(f"init.from={source} is a {name}: the lab imports {', '.join(kinds)} (the classes it exports)")
    kind, c = kinds[name], hf.config
    state = {k: v.detach() for k, v in hf.state_dict().items()}
    # (Megatron-BERT's head transform has a bias the export computes whatever architecture.bias is)
    biased = [k for k, v in state.items() if k.endswith(".bias") and bool(v.any()) and "predictions" not in k]
    tied = hf.get_output_embeddings().weight.data_ptr() == hf.get_input_embeddings().weight.data_ptr()
    settings = {"bias": bool(biased), "tie_embeddings": tied, **_settings(kind, c)}
    positions = getattr(c, "n_positions", None) or getattr(c, "max_position_embeddings", None) or max_len
    try:
        shape = TransformerConfig(**settings)
        model = shape.build(c.vocab_size, positions)
    except ValueError as err:
        raise UserError(f"init.from={source} ({name}) does not map onto the lab's model: {err}") from None
    ids = {f"{t}_id": getattr(c, f"{t}_token_id", None) for t in ("pad", "bos", "eos")}
    vocab = SimpleNamespace(size=c.vocab_size, **ids)
    exported_as = exporter(model, shape.name)
    if kind != exported_as:
        raise UserError(f"init.from={source} ({name}) maps onto a model that exports as {exported_as}")
    with torch.no_grad():
        ours, views = EXPORTERS[kind](model, SimpleNamespace(vocab=vocab))
        config = c.to_dict()
        for key, value in ours.items():
            if key not in NOT_COMPUTED and config.get(key) is not None and config[key] != value:
                raise UserError(
                    f"init.from={source} ({name}) has {key}={config[key]}: the lab's model computes {key}={value}"
                )
        for key, view in views.items():
            if key not in state or state[key].shape != view.shape:
                needs = f"{key} of shape {tuple(view.shape)}, which the lab's {shape.name} needs"
                raise UserError(f"init.from={source} ({name}) has no {needs}")
            view.copy_(state[key])
    check_tensors(source, name, kind, model, vocab, state)
    return shape, model


def _load(transformers, source: str):
    """The checkpoint as its own class (config.json's architectures), else transformers' base class for it."""
    config = transformers.AutoConfig.from_pretrained(source)
    cls = getattr(transformers, (config.architectures or [""])[0], None) or transformers.AutoModel
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # ("Loading weights" on stderr: the run prints its own lines)
    # transformers 5's T5Config says tie_word_embeddings=True whatever config.json says, and warns when the checkpoint
    # holds an untied head (T5 v1.1's): the import reads the tie from the tensors
    untied = logging.getLogger("transformers.modeling_utils")
    quiet = lambda record: "tie_word_embeddings=False" not in record.getMessage()  # noqa: E731
    untied.addFilter(quiet)
    try:
        return cls.from_pretrained(source)
    finally:
        untied.removeFilter(quiet)
        if bars:
            transformers.utils.logging.enable_progress_bar()


def check_tensors(source: str, name: str, kind: str, model, vocab, state: dict) -> None:
    """The export of the imported model holds the checkpoint's tensors (those it does not write must be zeros);
    else one line naming the first that differs."""
    _, weights = EXPORTERS[kind](model, SimpleNamespace(vocab=vocab))
    tied = {state[k].data_ptr() for k in weights if k in state}  # a tied head is the embedding, written once
    for key, tensor in state.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise UserError(
                f"init.from={source} ({name}): its {key} holds NaN or inf values: the checkpoint is damaged"
            )
        written = weights.get(key)
        if written is None and tensor.data_ptr() in tied:
            continue
        if (written is None and bool(tensor.any())) or (written is not None and not torch.equal(written, tensor)):
            raise UserError(f"init.from={source} ({name}): the lab's model cannot hold its {key}")


@functools.lru_cache(maxsize=1)
def imported(source: str) -> tuple[TransformerConfig, torch.nn.Module]:
    """import_model(source), once per process: a run reads the checkpoint for its settings, then for its weights."""
    return import_model(source)


def run_settings(source: str) -> dict:
    """The architecture settings of a run from init.from=source: the checkpoint's, but for the run's own training
    settings (dropout, activation checkpointing)."""
    return {k: v for k, v in asdict(imported(source)[0]).items() if k not in ("dropout", "activation_checkpointing")}


def check_positions(source: str, length: int) -> None:
    """A checkpoint with a table of positions has one for each of the run's `length` positions."""
    shape, checkpoint = imported(source)
    if shape.positions == "learned" and checkpoint.max_len < length:
        raise UserError(
            f"init.from={source} has {checkpoint.max_len} positions, this run's sequences take {length}: set "
            f"data.seq_len={checkpoint.max_len} or less"
        )


def start_from(source: str, model: torch.nn.Module, tokenizer: Tokenizer, bos_id: int) -> int:
    """The weights of the checkpoint at `source` in the run's `model` (built with run_settings(source)), for the
    run's `tokenizer` (the checkpoint's own, renumbered: selfsup.data.pretrained_tokenizer.lab_layout): each token's
    embedding (and untied head) row moves from its old id to its new one; a token the checkpoint has no row for
    (a special token the lab added) takes the mean of its rows plus the model's own initial row, except <s>, which
    starts the lab's decoders: without a <s> of its own it takes the row of the checkpoint's decoder_start_token_id
    (T5's <pad>). The position table is cut to the model's length. The number of tokens moved."""
    import transformers

    shape, checkpoint = imported(source)
    check_positions(source, model.max_len)
    old = load_pretrained(source)
    moves = {}  # new id -> old id
    for token, old_id in sorted(old.get_vocab(with_added_tokens=True).items(), key=lambda item: item[1]):
        new_id = tokenizer.token_to_id(token)
        if new_id is not None and new_id < model.vocab_size and old_id < checkpoint.vocab_size:
            moves.setdefault(new_id, old_id)
    start = getattr(transformers.AutoConfig.from_pretrained(source), "decoder_start_token_id", None)
    if bos_id not in moves and start is not None and start < checkpoint.vocab_size:
        moves[bos_id] = start
    new_ids, old_ids = torch.tensor(list(moves)), torch.tensor(list(moves.values()))
    theirs = dict(checkpoint.named_parameters())
    with torch.no_grad():
        for key, tensor in model.named_parameters():  # (a tied head is the embedding: named once)
            if key in ("tok_emb.weight", "lm_head.weight"):
                tensor.add_(theirs[key][: checkpoint.vocab_size].mean(dim=0))
                tensor[new_ids] = theirs[key][old_ids]
            elif key.endswith("pos_emb.weight"):
                tensor.copy_(theirs[key][: len(tensor)])
            else:
                tensor.copy_(theirs[key])
    imported.cache_clear()  # the run's model holds the weights now: the checkpoint's copy is not kept for training
    return len(moves)
