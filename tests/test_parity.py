"""selfsup-bench parity's pieces: the twin is the transformers class the export writes, and it is scored on the same
positions with the same loss as the lab's model (equal to float rounding when it holds the lab's weights)."""

import types
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from selfsup.data.vocab import Vocab
from selfsup.interop.export import EXPORTERS, exporter
from selfsup.models import TransformerConfig
from selfsup.objectives import build_objective
from selfsup.tools.parity import PARITY, twin, twin_sums
from selfsup.training.module import cross_entropy_sums

pytest.importorskip("transformers")
CONF = Path(__file__).resolve().parents[1] / "conf" / "architecture"


def preset(architecture: str) -> dict:
    """conf/architecture/<architecture>.yaml's settings, at a test's size."""
    settings = OmegaConf.to_container(OmegaConf.load(CONF / f"{architecture}.yaml"))
    return {**{k: v for k, v in settings.items() if k != "defaults"}, "d_model": 32, "n_layers": 2, "n_heads": 4}


@pytest.mark.parametrize("architecture", list(PARITY))
def test_the_twin_scores_a_batch_as_the_lab_does_when_it_holds_the_labs_weights(architecture):
    vocab = Vocab(size=300, n_sentinels=20)
    objective = build_objective(PARITY[architecture], vocab, 32)
    torch.manual_seed(0)
    shape = preset(architecture)
    model = TransformerConfig(**shape).build(vocab.size, 48)
    model.eval()
    hf = twin(model, shape["name"], vocab).eval()
    assert (
        type(hf).__name__
        == {
            "encoder": "MegatronBertForMaskedLM",
            "decoder": "GPT2LMHeadModel",
            "encoder_decoder": "BlenderbotForConditionalGeneration",
            "t5": "T5ForConditionalGeneration",
        }[architecture]
    )
    kind = exporter(model, shape["name"])
    _, weights = EXPORTERS[kind](model, types.SimpleNamespace(vocab=vocab))
    hf.load_state_dict({k: v.detach() for k, v in weights.items()}, strict=False)
    gen = torch.Generator().manual_seed(1)
    batch = objective(torch.randint(vocab.first_ordinary, vocab.size, (4, objective.raw_length), generator=gen), gen)
    with torch.no_grad():
        lab_nll, lab_scored, _ = cross_entropy_sums(model, batch)
        hf_nll, hf_scored = twin_sums(hf, batch)
    assert int(hf_scored) == int(lab_scored) == int(batch.n_scored) > 0
    # the encoder's twin normalises the features twice (selfsup.interop.export: a relative eps / (2 variance))
    assert float(hf_nll) == pytest.approx(float(lab_nll), rel=1e-4 if architecture == "encoder" else 1e-5)
