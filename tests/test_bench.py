"""`selfsup-bench train`'s default preset is the model and batch `selfsup-train` builds (a smoke run, not timed)."""

from hydra import compose, initialize_config_dir

from selfsup.data.vocab import Vocab
from selfsup.models import build_model
from selfsup.objectives import build_objective
from selfsup.run.cli import CONF_DIR
from selfsup.run.schema import register
from selfsup.tools.bench import main


def lab_config(objective: str):
    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return compose("train", overrides=[f"objective={objective}"])


def test_default_preset_is_the_labs_model(capsys):
    objective = "span_corruption"  # the encoder-decoder: its layers count per stack, as T5 counts them
    cfg = lab_config(objective)
    a, d = cfg.architecture, cfg.data
    obj = build_objective(objective, Vocab(size=d.vocab_size, n_sentinels=d.n_sentinels), d.seq_len)
    model = build_model(
        a.name,
        d.vocab_size,
        obj.model_length,
        d_model=a.d_model,
        n_layers=a.n_layers,
        n_heads=a.n_heads,
        d_ff=a.d_ff,
        n_decoder_layers=a.n_decoder_layers,
        activation=a.activation,
        bias=a.bias,
    )

    main(["train", "--objectives", objective, "--steps", "3", "--warmup", "1", "--rounds", "1", "--no-hf"])
    header, _, row = capsys.readouterr().out.strip().splitlines()[-3:]
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))

    layers = f"L{a.n_layers}" + (f"+{a.n_decoder_layers or a.n_layers}" if a.name == "encoder_decoder" else "")
    assert cells["shape"].split()[:4] == [a.name, f"d{a.d_model}", layers, f"H{a.n_heads}"]
    assert cells["batch"] == f"{d.batch_size}x{obj.raw_length}"
    assert cells["params"] == f"{model.num_parameters() / 1e6:.1f}M"
    assert float(cells["selfsup tokens/s"].replace(",", "")) > 0
