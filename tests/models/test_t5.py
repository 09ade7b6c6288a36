"""architecture=t5 is T5 as transformers computes it: the export's T5ForConditionalGeneration gives the lab's
logits (every shape option), and the relative position buckets are T5's."""

import json
import types

import pytest
import torch
from safetensors.torch import save_file

from selfsup.data.vocab import Vocab
from selfsup.interop.export import exporter, t5
from selfsup.models import TransformerConfig
from selfsup.models.positions import relative_position_bucket

transformers = pytest.importorskip("transformers")
T5 = dict(
    name="encoder_decoder",
    norm="rmsnorm",
    positions="relative",
    scale_attention=False,
    bias=False,
    tie_embeddings=False,
    activation="gated-gelu",
)


def exported(shape: dict, vocab: Vocab, folder, max_len: int = 48):
    """The lab's model and transformers' from_pretrained of its export (config.json and safetensors, as
    selfsup-export writes them: transformers 5 ties T5's head to its embedding unless the file holds both)."""
    torch.manual_seed(0)
    model = TransformerConfig(**{**T5, **shape}).build(vocab.size, max_len).eval()
    for p in model.parameters():  # away from the init, so every weight counts
        p.data.add_(torch.randn_like(p) * 0.05)
    config, weights = t5(model, types.SimpleNamespace(vocab=vocab))
    save_file(
        {k: v.detach().contiguous().clone() for k, v in weights.items()},
        str(folder / "model.safetensors"),
        metadata={"format": "pt"},
    )
    (folder / "config.json").write_text(json.dumps(config))
    hf = transformers.T5ForConditionalGeneration.from_pretrained(folder).eval()
    assert hf.lm_head.weight is not hf.shared.weight and not hf.config.scale_decoder_outputs
    return model, hf


@pytest.mark.parametrize(
    "shape",
    [
        dict(d_model=32, n_layers=2, n_heads=4),
        dict(
            d_model=48, n_layers=1, n_decoder_layers=3, n_heads=6, d_ff=40, relative_buckets=8, relative_max_distance=20
        ),
        dict(d_model=32, n_layers=2, n_heads=2, activation="relu", relative_buckets=16, relative_max_distance=32),
    ],
)
def test_t5_export_gives_the_labs_logits(shape, tmp_path):
    vocab = Vocab(size=300)
    model, hf = exported(shape, vocab, tmp_path)
    gen = torch.Generator().manual_seed(1)
    enc = torch.randint(vocab.first_ordinary, vocab.size, (3, 40), generator=gen)
    dec = torch.randint(vocab.first_ordinary, vocab.size, (3, 30), generator=gen)
    mask = torch.ones_like(enc)
    mask[1, 25:] = 0  # a padded encoder row
    with torch.no_grad():
        ours = model.head(model(encoder_inputs=enc, decoder_inputs=dec, encoder_mask=mask))[..., : vocab.size]
        theirs = hf(input_ids=enc, attention_mask=mask, decoder_input_ids=dec).logits
        features = hf.encoder(input_ids=enc, attention_mask=mask).last_hidden_state
        own = model(encoder_inputs=enc, encoder_mask=mask)
    assert (ours - theirs).abs().max() <= 1e-4
    assert (own - features)[mask.bool()].abs().max() <= 1e-4


@pytest.mark.parametrize("bidirectional", [True, False])
def test_relative_buckets_are_t5s(bidirectional):
    from transformers.models.t5.modeling_t5 import T5Attention

    relative = torch.arange(-300, 300)[None, :] - torch.arange(0, 1)[:, None]
    for buckets, distance in ((32, 128), (8, 20)):
        ours = relative_position_bucket(relative, bidirectional, buckets, distance)
        theirs = T5Attention._relative_position_bucket(relative, bidirectional, buckets, distance)
        assert torch.equal(ours, theirs)


def test_a_model_no_transformers_class_computes_is_refused_in_one_line():
    from selfsup.errors import UserError

    half = TransformerConfig(name="encoder_decoder", norm="rmsnorm").build(100, 16)  # T5's norm, learned positions
    with pytest.raises(UserError, match="architecture.norm=rmsnorm has no BlenderbotForConditionalGeneration"):
        exporter(half, "encoder_decoder")
    tied = TransformerConfig(**{**T5, "tie_embeddings": True}).build(100, 16)
    with pytest.raises(UserError, match="architecture.tie_embeddings=True has no T5ForConditionalGeneration"):
        exporter(tied, "encoder_decoder")
    assert exporter(TransformerConfig(**T5).build(100, 16), "encoder_decoder") == "t5"


def test_an_all_padding_encoder_row_is_finite_with_relative_positions():
    """The stack folds padding into its position bias once (fold_mask); a row with no key reads nothing."""
    model = TransformerConfig(**T5, d_model=32, n_layers=2, n_heads=4).build(100, 16).eval()
    enc, dec = torch.randint(10, 100, (2, 8)), torch.randint(10, 100, (2, 5))
    mask = torch.ones_like(enc)
    mask[1] = 0
    with torch.no_grad():
        assert torch.isfinite(model(encoder_inputs=enc, decoder_inputs=dec, encoder_mask=mask)).all()
        features = model(encoder_inputs=enc, encoder_mask=mask)
    assert torch.isfinite(features).all()
    assert torch.allclose(features[0], model(encoder_inputs=enc[:1], encoder_mask=mask[:1])[0], atol=1e-6)


def test_init_t5_draws_each_weight_as_transformers_initialises_t5():
    """init=t5: every tensor the export maps has the mean and spread of transformers' T5 initialisation (its
    T5PreTrainedModel._init_weights) within 4 standard errors of the two samples."""
    from selfsup.tools.parity import twin

    vocab = Vocab(size=500)
    torch.manual_seed(0)
    model = TransformerConfig(**T5, init="t5", d_model=64, n_layers=2, n_decoder_layers=1, n_heads=4).build(500, 64)
    hf = twin(model, "encoder_decoder", vocab)
    assert hf.lm_head.weight is not hf.shared.weight
    _, weights = t5(model, types.SimpleNamespace(vocab=vocab))
    theirs = hf.state_dict()
    for name, mine in weights.items():
        mine, other = mine.detach().flatten().double(), theirs[name].flatten().double()
        n = mine.numel()
        if other.std() == 0:  # the norms: ones
            assert torch.equal(mine, other), name
            continue
        assert abs(mine.mean() - other.mean()) < 4 * other.std() * (2 / n) ** 0.5, name
        assert abs(mine.std() / other.std() - 1) < 4 / n**0.5, (name, float(mine.std()), float(other.std()))


def test_init_gpt2_is_the_default_and_init_is_checked():
    assert TransformerConfig().init == "gpt2"
    with pytest.raises(ValueError, match="architecture.init=xavier is unknown: use one of gpt2, t5"):
        TransformerConfig(init="xavier")
