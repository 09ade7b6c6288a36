"""`selfsup-export RUN_DIR|CHECKPOINT OUT_DIR`: a trained model as a Hugging Face `transformers` folder.

    selfsup-export outputs/<date>/<time> hf/
    python -c "from transformers import AutoModelForCausalLM, AutoTokenizer; AutoModelForCausalLM.from_pretrained('hf')"

Each architecture maps onto a `transformers` class whose blocks compute what the lab's do (pre-LayerNorm,
learned absolute positions, no embedding LayerNorm, tied embeddings; biases the lab leaves out are zeros):

    decoder          GPT2LMHeadModel                      AutoModelForCausalLM    logits exact
    encoder          MegatronBertForMaskedLM              AutoModelForMaskedLM    hidden states exact (AutoModel);
                                                                                  logits see below
    encoder_decoder  BlenderbotForConditionalGeneration   AutoModelForSeq2SeqLM   logits exact
    architecture=t5  T5ForConditionalGeneration           AutoModelForSeq2SeqLM   logits exact (RMSNorm, relative
                                                                                  positions, gated-GELU, untied)

GPT-2 and Blenderbot hold the same computation. BERT-family masked-LM heads apply a transform (dense,
activation, LayerNorm) between the encoder and the output embedding that the lab's head does not have; the
export makes it the identity as far as arithmetic allows: the encoder's final LayerNorm is the lab's, the dense
layer divides by its weight, removes its bias and adds a constant C > sqrt(d_model) + 6 to every feature (GELU
and ReLU are the identity above 6 in float32, and LayerNorm ignores a constant shift), and the transform's
LayerNorm carries the lab's final LayerNorm weight and bias again. What is left is that the features are
normalised twice: the logits match the lab's to a relative eps / (2 variance) of the final residual stream
(2e-4 after 300 steps of the default encoder, smaller as training grows the stream; docs/export.md); hidden
states (AutoModel) are exact. A decoder trained with a prefix-LM objective exports as GPT-2, which attends
causally everywhere (the prefix's bidirectional attention is not kept).

Weights are written as safetensors, the tokenizer as the lab's `tokenizer.json` with its special tokens named
(pad, bos, eos, mask, the mode tokens and the sentinels keep their ids; `<mask>` and `<extra_id_N>` take the
space before them, as `selfsup.load(...).encode` does, so "a <mask>" encodes as in training). Only plain files are written here:
exporting does not need `transformers` installed.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save_file

from selfsup.common.names import DECODER, ENCODER, ENCODER_DECODER
from selfsup.errors import UserError
from selfsup.interop.pretrained import Pretrained, load

HF_CLASSES = {
    DECODER: ("gpt2", "GPT2LMHeadModel", "AutoModelForCausalLM"),
    ENCODER: ("megatron-bert", "MegatronBertForMaskedLM", "AutoModelForMaskedLM"),
    ENCODER_DECODER: ("blenderbot", "BlenderbotForConditionalGeneration", "AutoModelForSeq2SeqLM"),
    "t5": ("t5", "T5ForConditionalGeneration", "AutoModelForSeq2SeqLM"),
}
EPS = 1e-5  # the lab's LayerNorm eps (torch's default)


def _vocab(weight: torch.Tensor, size: int) -> torch.Tensor:
    return weight[:size]  # the lab pads the vocabulary to a multiple of 64; transformers gets the real ids


def _bias(linear: torch.nn.Module, rows: slice | None = None) -> torch.Tensor:
    """A bias, or zeros where the lab's layer has none (architecture.bias=false)."""
    out = linear.weight.shape[0] if isinstance(linear, torch.nn.Linear) else linear.normalized_shape[0]
    bias = linear.bias if linear.bias is not None else torch.zeros(out)
    return bias[rows] if rows is not None else bias


def _common(model, p) -> dict:
    vocab = p.vocab
    return {
        "vocab_size": vocab.size,
        "pad_token_id": vocab.pad_id,
        "bos_token_id": vocab.bos_id,
        "eos_token_id": vocab.eos_id,
        "tie_word_embeddings": model.lm_head.weight is model.tok_emb.weight,
        "torch_dtype": "float32",
    }


def gpt2(model, p) -> tuple[dict, dict]:
    """decoder -> GPT2LMHeadModel: Conv1D weights are the transposes of the lab's Linear weights."""
    config = {
        **_common(model, p),
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_embd": model.d_model,
        "n_layer": len(model.decoder.blocks),
        "n_head": model.n_heads,
        "n_inner": model.d_ff,
        "n_positions": model.max_len,
        "activation_function": model.activation,
        "resid_pdrop": model.dropout_p,
        "embd_pdrop": model.dropout_p,
        "attn_pdrop": model.dropout_p,
        "layer_norm_epsilon": EPS,
    }
    s = model.decoder
    w = {
        "transformer.wte.weight": _vocab(model.tok_emb.weight, p.vocab.size),
        "transformer.wpe.weight": s.pos_emb.weight,
        "transformer.ln_f.weight": s.ln_f.weight,
        "transformer.ln_f.bias": _bias(s.ln_f),
    }
    for i, b in enumerate(s.blocks):
        h = f"transformer.h.{i}."
        w.update(
            {
                h + "ln_1.weight": b.ln_attn.weight,
                h + "ln_1.bias": _bias(b.ln_attn),
                h + "attn.c_attn.weight": b.attn.qkv.weight.T,
                h + "attn.c_attn.bias": _bias(b.attn.qkv),
                h + "attn.c_proj.weight": b.attn.proj.weight.T,
                h + "attn.c_proj.bias": _bias(b.attn.proj),
                h + "ln_2.weight": b.ln_mlp.weight,
                h + "ln_2.bias": _bias(b.ln_mlp),
                h + "mlp.c_fc.weight": b.mlp.fc.weight.T,
                h + "mlp.c_fc.bias": _bias(b.mlp.fc),
                h + "mlp.c_proj.weight": b.mlp.proj.weight.T,
                h + "mlp.c_proj.bias": _bias(b.mlp.proj),
            }
        )
    if not config["tie_word_embeddings"]:
        w["lm_head.weight"] = _vocab(model.lm_head.weight, p.vocab.size)
    return config, w


def _qkv(attn, prefix: str, names: tuple[str, str, str], suffix: str = "", biases: bool = True) -> dict:
    """The lab's one [3d, d] projection as three [d, d] ones (query, key, value), with their biases (zeros where
    the lab has none) unless biases=False (a class without them: T5)."""
    d = attn.qkv.weight.shape[1]
    out = {}
    for n, name in enumerate(names):
        rows = slice(n * d, (n + 1) * d)
        out[f"{prefix}{name}{suffix}.weight"] = attn.qkv.weight[rows]
        if biases:
            out[f"{prefix}{name}{suffix}.bias"] = _bias(attn.qkv, rows)
    return out


def megatron_bert(model, p) -> tuple[dict, dict]:
    """encoder -> MegatronBertForMaskedLM (pre-LN BERT without an embedding LayerNorm); its head's transform is
    made the identity (module docstring)."""
    d = model.d_model
    config = {
        **_common(model, p),
        "model_type": "megatron-bert",
        "architectures": ["MegatronBertForMaskedLM"],
        "hidden_size": d,
        "num_hidden_layers": len(model.encoder.blocks),
        "num_attention_heads": model.n_heads,
        "intermediate_size": model.d_ff,
        "hidden_act": model.activation,
        "max_position_embeddings": model.max_len,
        "hidden_dropout_prob": model.dropout_p,
        "attention_probs_dropout_prob": model.dropout_p,
        "type_vocab_size": 1,
        "layer_norm_eps": EPS,
        "position_embedding_type": "absolute",
    }
    s = model.encoder
    g, b = s.ln_f.weight.detach(), _bias(s.ln_f).detach()
    if bool((g == 0).any()):
        raise UserError(
            "this encoder's final LayerNorm has zero weights, whose features Megatron-BERT's "
            "masked-LM head cannot recover: it cannot be exported exactly"
        )
    shift = math.ceil(math.sqrt(d)) + 8  # every normalised feature is > 6 after the shift
    w = {
        "bert.embeddings.word_embeddings.weight": _vocab(model.tok_emb.weight, p.vocab.size),
        "bert.embeddings.position_embeddings.weight": s.pos_emb.weight,
        "bert.embeddings.token_type_embeddings.weight": torch.zeros(1, d),
        "bert.encoder.ln.weight": g,
        "bert.encoder.ln.bias": b,
        # the head's transform: (g n + b) / g - b / g + shift = n + shift, then LayerNorm(n + shift) g + b
        "cls.predictions.transform.dense.weight": torch.diag(1 / g),
        "cls.predictions.transform.dense.bias": shift - b / g,
        "cls.predictions.transform.LayerNorm.weight": g,
        "cls.predictions.transform.LayerNorm.bias": b,
        "cls.predictions.bias": torch.zeros(p.vocab.size),
    }
    for i, b in enumerate(s.blocks):
        h = f"bert.encoder.layer.{i}."
        w.update(_qkv(b.attn, h + "attention.self.", ("query", "key", "value")))
        w.update(
            {
                h + "attention.ln.weight": b.ln_attn.weight,
                h + "attention.ln.bias": _bias(b.ln_attn),
                h + "attention.output.dense.weight": b.attn.proj.weight,
                h + "attention.output.dense.bias": _bias(b.attn.proj),
                h + "ln.weight": b.ln_mlp.weight,
                h + "ln.bias": _bias(b.ln_mlp),
                h + "intermediate.dense.weight": b.mlp.fc.weight,
                h + "intermediate.dense.bias": _bias(b.mlp.fc),
                h + "output.dense.weight": b.mlp.proj.weight,
                h + "output.dense.bias": _bias(b.mlp.proj),
            }
        )
    if not config["tie_word_embeddings"]:
        w["cls.predictions.decoder.weight"] = _vocab(model.lm_head.weight, p.vocab.size)
        w["cls.predictions.decoder.bias"] = torch.zeros(p.vocab.size)
    return config, w


def blenderbot(model, p) -> tuple[dict, dict]:
    """encoder_decoder -> BlenderbotForConditionalGeneration (pre-LN encoder and decoder, learned positions,
    unscaled embeddings shared by both stacks and the head)."""
    config = {
        **_common(model, p),
        "model_type": "blenderbot",
        "architectures": ["BlenderbotForConditionalGeneration"],
        "d_model": model.d_model,
        "encoder_layers": len(model.encoder.blocks),
        "decoder_layers": len(model.decoder.blocks),
        "encoder_attention_heads": model.n_heads,
        "decoder_attention_heads": model.n_heads,
        "encoder_ffn_dim": model.d_ff,
        "decoder_ffn_dim": model.d_ff,
        "activation_function": model.activation,
        "max_position_embeddings": model.max_len,
        "dropout": model.dropout_p,
        "attention_dropout": model.dropout_p,
        "activation_dropout": 0.0,
        "scale_embedding": False,
        "decoder_start_token_id": p.vocab.bos_id,
        "encoder_no_repeat_ngram_size": 0,
        "forced_eos_token_id": None,
    }
    embedding = _vocab(model.tok_emb.weight, p.vocab.size)  # each stack's own key too (untied heads need them)
    w = {
        "model.shared.weight": embedding,
        "model.encoder.embed_tokens.weight": embedding,
        "model.decoder.embed_tokens.weight": embedding,
    }
    for stack_name in ("encoder", "decoder"):
        s = getattr(model, stack_name)
        top = f"model.{stack_name}."
        w.update(
            {
                top + "embed_positions.weight": s.pos_emb.weight,
                top + "layer_norm.weight": s.ln_f.weight,
                top + "layer_norm.bias": _bias(s.ln_f),
            }
        )
        for i, b in enumerate(s.blocks):
            h = f"{top}layers.{i}."
            attentions = [("self_attn", b.attn, b.ln_attn)]
            if b.cross_attn is not None:
                attentions.append(("encoder_attn", b.cross_attn, b.ln_cross))
            for name, attn, ln in attentions:
                w.update(_qkv(attn, h + name + ".", ("q", "k", "v"), "_proj"))
                w.update(
                    {
                        h + f"{name}.out_proj.weight": attn.proj.weight,
                        h + f"{name}.out_proj.bias": _bias(attn.proj),
                        h + f"{name}_layer_norm.weight": ln.weight,
                        h + f"{name}_layer_norm.bias": _bias(ln),
                    }
                )
            w.update(
                {
                    h + "final_layer_norm.weight": b.ln_mlp.weight,
                    h + "final_layer_norm.bias": _bias(b.ln_mlp),
                    h + "fc1.weight": b.mlp.fc.weight,
                    h + "fc1.bias": _bias(b.mlp.fc),
                    h + "fc2.weight": b.mlp.proj.weight,
                    h + "fc2.bias": _bias(b.mlp.proj),
                }
            )
    if not config["tie_word_embeddings"]:
        w["lm_head.weight"] = _vocab(model.lm_head.weight, p.vocab.size)
    return config, w


def t5(model, p) -> tuple[dict, dict]:
    """architecture=t5 (an encoder-decoder with RMSNorm, relative position bias, unscaled attention, no biases,
    an untied head) -> T5ForConditionalGeneration: T5 v1.1 with feed_forward_proj gated-gelu (relu: v1.0's)."""
    c = model.config
    enc, dec = model.encoder, model.decoder
    config = {
        **_common(model, p),
        "model_type": "t5",
        "architectures": ["T5ForConditionalGeneration"],
        "d_model": model.d_model,
        "d_kv": model.d_model // model.n_heads,
        "d_ff": model.d_ff,
        "num_layers": len(enc.blocks),
        "num_decoder_layers": len(dec.blocks),
        "num_heads": model.n_heads,
        "relative_attention_num_buckets": c.relative_buckets,
        "relative_attention_max_distance": c.relative_max_distance,
        "dropout_rate": model.dropout_p,
        "layer_norm_epsilon": enc.ln_f.eps,
        "feed_forward_proj": model.activation,
        "is_encoder_decoder": True,
        "decoder_start_token_id": p.vocab.bos_id,
    }
    embedding = _vocab(model.tok_emb.weight, p.vocab.size)
    w = {"shared.weight": embedding, "encoder.embed_tokens.weight": embedding, "decoder.embed_tokens.weight": embedding}
    for name, s in (("encoder", enc), ("decoder", dec)):
        w[f"{name}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = s.rel_bias.bias.weight
        w[f"{name}.final_layer_norm.weight"] = s.ln_f.weight
        for i, b in enumerate(s.blocks):
            layers = [("SelfAttention", b.attn, b.ln_attn)] + (
                [("EncDecAttention", b.cross_attn, b.ln_cross)] if b.cross_attn is not None else []
            )
            for n, (kind, attn, ln) in enumerate(layers):
                h = f"{name}.block.{i}.layer.{n}."
                w.update(_qkv(attn, h + kind + ".", ("q", "k", "v"), biases=False))
                w.update({h + kind + ".o.weight": attn.proj.weight, h + "layer_norm.weight": ln.weight})
            h = f"{name}.block.{i}.layer.{len(layers)}."
            ff = {"wi_0": b.mlp.gate, "wi_1": b.mlp.fc} if b.mlp.gate is not None else {"wi": b.mlp.fc}
            w.update({h + f"DenseReluDense.{k}.weight": layer.weight for k, layer in {**ff, "wo": b.mlp.proj}.items()})
            w[h + "layer_norm.weight"] = b.ln_mlp.weight
    w["lm_head.weight"] = _vocab(model.lm_head.weight, p.vocab.size)
    return config, w


T5_SETTINGS = {
    "norm": "rmsnorm",
    "positions": "relative",
    "scale_attention": False,
    "bias": False,
    "tie_embeddings": False,
}
PLAIN_SETTINGS = {"norm": "layernorm", "positions": "learned", "scale_attention": True}
EXPORTERS = {DECODER: gpt2, ENCODER: megatron_bert, ENCODER_DECODER: blenderbot, "t5": t5}


def exporter(model, architecture: str) -> str:
    """The EXPORTERS key of a model: t5 for an encoder-decoder with T5's settings (architecture=t5), else its
    architecture; a model whose settings no transformers class computes is refused in one line."""
    c = model.config
    t5_like = architecture == ENCODER_DECODER and c.positions == "relative"
    wanted = T5_SETTINGS if t5_like else PLAIN_SETTINGS
    for key, value in wanted.items():
        if getattr(c, key) != value:
            target = "T5ForConditionalGeneration" if t5_like else HF_CLASSES[architecture][1]
            raise UserError(
                f"architecture.{key}={getattr(c, key)} has no {target} equivalent (it computes {key}={value}): "
                f"export a model trained with architecture={'t5' if t5_like else architecture} settings"
            )
    if not t5_like and c.activation.startswith("gated-"):
        raise UserError(f"architecture.activation={c.activation} is T5's: export it with architecture=t5")
    return "t5" if t5_like else architecture


def tokenizer_files(p) -> dict[str, str]:
    """tokenizer.json (the lab's, ids unchanged) and the tokenizer_config.json that names its special tokens."""
    v = p.vocab
    names = [p.tokenizer.id_to_token(i) for i in range(v.first_ordinary)]
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": p.model.max_len,
        "pad_token": names[v.pad_id],
        "bos_token": names[v.bos_id],
        "eos_token": names[v.eos_id],
        "mask_token": names[v.mask_id],
        "clean_up_tokenization_spaces": False,
        "additional_special_tokens": [
            names[i] for i in range(v.first_ordinary) if i not in (v.pad_id, v.bos_id, v.eos_id, v.mask_id)
        ],
    }
    tokenizer = json.loads(p.tokenizer.to_str())
    for token in tokenizer["added_tokens"]:  # "a <mask>" -> 'Ġa', '<mask>': the space goes, as in training
        if token["id"] == v.mask_id or v.sentinel_start <= token["id"] < v.sentinel_end:
            token["lstrip"] = True
    return {
        "tokenizer.json": json.dumps(tokenizer, ensure_ascii=False),
        "tokenizer_config.json": json.dumps(config, indent=2),
    }


def export(path: str | Path, out_dir: str | Path) -> dict:
    """Write the Hugging Face folder of a run dir's (or checkpoint's) model into out_dir, which must not exist
    or be empty. Returns {"class", "auto", "out_dir", "checkpoint"}."""
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise UserError(f"{out_dir} already exists and is not empty: pass a new folder (nothing was written)")
    return export_model(load(path), out_dir)


def export_model(p: Pretrained, out_dir: str | Path) -> dict:
    """export() of a loaded model (a run's, or a model of its shape put in its place: dataclasses.replace)."""
    out_dir = Path(out_dir)
    if p.architecture not in HF_CLASSES:
        raise UserError(
            f"architecture {p.architecture} has no transformers class to export to: exportable are "
            f"{', '.join(EXPORTERS)}"
        )
    kind = exporter(p.model, p.architecture)
    config, weights = EXPORTERS[kind](p.model, p)
    model_type, cls, auto = HF_CLASSES[kind]
    objective = (p.config.get("objective") or {}).get("name")
    config["selfsup"] = {"architecture": p.architecture, "objective": objective, "checkpoint": p.checkpoint.name}
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        staging.chmod(0o755)  # mkdtemp makes it private
        save_file(
            {k: t.detach().float().contiguous().clone() for k, t in weights.items()},
            str(staging / "model.safetensors"),
            metadata={"format": "pt"},
        )
        (staging / "config.json").write_text(json.dumps(config, indent=2))
        for name, text in tokenizer_files(p).items():
            (staging / name).write_text(text)
        if out_dir.exists():
            out_dir.rmdir()  # empty (checked above)
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return {
        "class": cls,
        "auto": auto,
        "out_dir": str(out_dir),
        "checkpoint": str(p.checkpoint),
        "objective": objective,
        "architecture": p.architecture,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="selfsup-export",
        description=(
            "Write a trained model as a Hugging Face transformers folder (config.json, model.safetensors, tokenizer): "
            "decoders as GPT-2, encoders as Megatron-BERT, encoder-decoders as Blenderbot (architecture=t5 as T5)."
        ),
    )
    parser.add_argument("path", metavar="RUN_DIR|CHECKPOINT", help="a run dir (its best checkpoint) or a .ckpt file")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="a new (or empty) folder")
    args = parser.parse_args(argv)
    try:
        done = export(args.path, args.out_dir)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    print(
        f"{done['architecture']} from {done['checkpoint']} -> {done['out_dir']} ({done['class']}); load it with "
        f"transformers.{done['auto']}.from_pretrained({done['out_dir']!r}) and AutoTokenizer"
    )
    if done["architecture"] == DECODER and done["objective"] in ("prefix_lm", "ul2"):
        print(f"note: GPT-2 attends causally everywhere; the bidirectional prefix of {done['objective']} is not kept")
