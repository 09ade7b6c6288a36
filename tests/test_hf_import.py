"""Models in (selfsup.interop.hf_import): a checkpoint of each class the export writes comes back as the lab's model, and
exports back exactly; a checkpoint the lab's model cannot compute is refused in one line naming what differs."""

import json
import types
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import save_file

from selfsup.errors import UserError
from selfsup.interop.export import EXPORTERS, exporter
from selfsup.interop.hf_import import import_model
from selfsup.models import TransformerConfig

transformers = pytest.importorskip("transformers")
CONF = Path(__file__).resolve().parents[1] / "conf" / "architecture"
VOCAB = types.SimpleNamespace(size=300, pad_id=0, bos_id=1, eos_id=2)


def preset(architecture: str, **more) -> dict:
    settings = OmegaConf.to_container(OmegaConf.load(CONF / f"{architecture}.yaml"))
    return {**{k: v for k, v in settings.items() if k != "defaults"}, "d_model": 32, "n_heads": 4, **more}


def write(folder: Path, config: dict, weights: dict) -> Path:
    """A transformers folder as selfsup-export writes one."""
    folder.mkdir()
    tensors = {k: v.detach().float().contiguous().clone() for k, v in weights.items()}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    "architecture,more",
    [
        ("decoder", {}),
        ("encoder", {}),
        ("encoder_decoder", {"n_decoder_layers": 3}),
        ("encoder_decoder", {"bias": True, "activation": "gelu"}),
        ("t5", {"init": "t5"}),
        ("decoder", {"tie_embeddings": False, "bias": False}),
    ],
)
def test_an_export_comes_back_as_the_same_model_and_exports_back_exactly(architecture, more, tmp_path):
    torch.manual_seed(0)
    shape = TransformerConfig(**preset(architecture, **more))
    model = shape.build(VOCAB.size, 48).eval()
    for p in model.parameters():  # away from the init, so every weight counts
        p.data.add_(torch.randn_like(p) * 0.05)
    kind = exporter(model, shape.name)
    config, weights = EXPORTERS[kind](model, types.SimpleNamespace(vocab=VOCAB))
    imported_shape, imported = import_model(str(write(tmp_path / "hf", config, weights)), max_len=48)
    for key in ("name", "d_model", "n_layers", "n_heads", "activation", "bias", "tie_embeddings", "norm", "positions"):
        assert getattr(imported_shape, key) == getattr(shape, key), key
    _, again = EXPORTERS[kind](imported, types.SimpleNamespace(vocab=VOCAB))
    assert again.keys() == weights.keys() and all(torch.equal(again[k], weights[k]) for k in weights)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB.size, (2, 16), generator=gen)
    batch = dict(encoder_inputs=ids, decoder_inputs=ids) if shape.name == "encoder_decoder" else {}
    batch = batch or ({"encoder_inputs": ids} if shape.name == "encoder" else {"decoder_inputs": ids})
    with torch.no_grad():
        mine, theirs = model.head(model(**batch))[..., : VOCAB.size], imported.eval()
        assert torch.equal(mine, theirs.head(theirs(**batch))[..., : VOCAB.size])


@pytest.mark.parametrize(
    "cls,config",
    [
        ("GPT2LMHeadModel", dict(n_embd=32, n_layer=2, n_head=4, n_positions=40)),  # GPT-2's own gelu_new
        (
            "T5ForConditionalGeneration",
            dict(d_model=32, d_ff=48, d_kv=8, num_layers=2, num_heads=4, feed_forward_proj="gated-gelu"),
        ),
    ],
)
def test_a_model_transformers_made_comes_in_and_exports_back_exactly(cls, config, tmp_path):
    model_class = getattr(transformers, cls)
    torch.manual_seed(0)
    hf = model_class(model_class.config_class(vocab_size=300, tie_word_embeddings=False, **config))
    if cls.startswith("T5"):  # transformers 5 ties T5's head whatever the config says (selfsup.tools.parity.twin)
        hf.config.tie_word_embeddings = False
        hf.lm_head.weight = torch.nn.Parameter(torch.randn_like(hf.lm_head.weight))
    hf.save_pretrained(tmp_path / "hf")
    shape, model = import_model(str(tmp_path / "hf"), max_len=40)
    _, weights = EXPORTERS[exporter(model, shape.name)](model, types.SimpleNamespace(vocab=VOCAB))
    state = hf.state_dict()
    assert weights.keys() <= state.keys() and all(torch.equal(weights[k], state[k]) for k in weights)
    ids = torch.randint(3, 300, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # the same function: GPT-2's tanh GELU and T5's gated one computed as transformers does
        if cls.startswith("T5"):
            ours, theirs = model.eval()(encoder_inputs=ids, decoder_inputs=ids), hf.eval()(ids, decoder_input_ids=ids)
        else:
            ours, theirs = model.eval()(decoder_inputs=ids), hf.eval()(ids)
    assert (model.head(ours)[..., :300] - theirs.logits).abs().max() <= 1e-5


@pytest.mark.parametrize(
    "cls,config,words",
    [
        (
            "GPT2LMHeadModel",
            dict(n_embd=32, n_layer=1, n_head=4, activation_function="silu"),
            "activation=silu is unknown",
        ),
        ("BertForMaskedLM", dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4), "is a BertForMaskedLM"),
        (
            "MegatronBertForMaskedLM",
            dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64),
            "type_vocab_size=2: the lab's model computes type_vocab_size=1",
        ),
        (
            "MegatronBertForMaskedLM",
            dict(
                hidden_size=32,
                num_hidden_layers=1,
                num_attention_heads=4,
                intermediate_size=64,
                type_vocab_size=1,
                layer_norm_eps=1e-5,
            ),
            "the lab's model cannot hold its (bert.embeddings.token_type_embeddings|cls.predictions.transform)",
        ),
    ],
)
def test_a_checkpoint_the_lab_cannot_compute_is_refused_in_one_line(cls, config, words, tmp_path):
    model_class = getattr(transformers, cls)
    model_class(model_class.config_class(vocab_size=300, **config)).save_pretrained(tmp_path / "hf")
    with pytest.raises(UserError, match=f"^init.from={tmp_path / 'hf'} .*{words}") as err:
        import_model(str(tmp_path / "hf"))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kind", ["gpt2", "t5"])
def test_a_run_from_a_checkpoint_takes_each_tokens_rows_to_its_new_id(kind, tmp_path):
    """start_from: the run's tokenizer is the checkpoint's in the lab's layout; each token's embedding and head row
    moves by its string, the positions are cut to the run's length; a special token the lab adds takes the mean
    row plus the model's own initial row, but a missing <s> (it starts the lab's decoders) takes the row of the
    checkpoint's decoder_start_token_id."""
    from helpers import hf_checkpoint

    from selfsup.data.pretrained_tokenizer import lab_layout, load_pretrained
    from selfsup.data.tokenizer import vocab_from_tokenizer
    from selfsup.interop.hf_import import run_settings, start_from

    texts = [f"document {i}: the module returns a list of {i % 7} files" for i in range(200)]
    folder = str(hf_checkpoint(kind, tmp_path / kind, texts))
    old = load_pretrained(folder)
    tokenizer = lab_layout(old, n_sentinels=10)
    vocab = vocab_from_tokenizer(tokenizer, 10)
    torch.manual_seed(1)
    model = TransformerConfig(**run_settings(folder)).build(vocab.size, 24)
    fresh = {k: v.detach().clone() for k, v in model.named_parameters()}
    moved = start_from(folder, model, tokenizer, vocab.bos_id)
    hf = getattr(transformers, "GPT2LMHeadModel" if kind == "gpt2" else "T5ForConditionalGeneration")
    hf = hf.from_pretrained(folder)
    embedding, head = hf.get_input_embeddings().weight, hf.get_output_embeddings().weight
    rows = {tokenizer.token_to_id(t): i for t, i in old.get_vocab(with_added_tokens=True).items()}
    new, was = torch.tensor(list(rows)), torch.tensor(list(rows.values()))
    assert torch.equal(model.tok_emb.weight[new], embedding[was]) and torch.equal(model.lm_head.weight[new], head[was])
    added = [i for i in range(vocab.size) if i not in rows and not (kind == "t5" and i == vocab.bos_id)]
    assert len(added) == vocab.size - old.get_vocab_size() - (kind == "t5") > 0
    for ours, theirs, name in ((model.tok_emb, embedding, "tok_emb.weight"), (model.lm_head, head, "lm_head.weight")):
        initial = fresh.get(name, fresh["tok_emb.weight"])[added]  # (a tied head is the embedding)
        assert torch.allclose(ours.weight[added], theirs[: hf.config.vocab_size].mean(dim=0) + initial)
    if kind == "t5":  # T5 has no <s>: the lab's decoders start from the row of its decoder start, <pad>
        assert moved == len(rows) + 1
        assert torch.equal(model.tok_emb.weight[vocab.bos_id], embedding[0])
        assert torch.equal(model.lm_head.weight[vocab.bos_id], head[0])
    else:
        assert moved == len(rows) and torch.equal(model.decoder.pos_emb.weight, hf.transformer.wpe.weight[:24])
