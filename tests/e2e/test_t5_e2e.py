"""architecture=t5 end to end: span corruption trains it, selfsup-export writes T5ForConditionalGeneration with the
lab's logits and the sentinels as <extra_id_N>, and selfsup.load rebuilds it (relative positions: no table)."""

import json

import pytest
import torch

import selfsup

transformers = pytest.importorskip("transformers")


def test_a_t5_run_exports_as_t5_with_the_labs_logits(train, tmp_path):
    run = tmp_path / "run"
    out = train("objective=span_corruption", "architecture=t5", "logger=csv", run_dir=run)
    assert out.returncode == 0, out.stderr[-2000:]
    # the family (what the evaluation, report and plots group by) and the preset, which the run's lines show
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["architecture"], summary["architecture_preset"]) == ("encoder_decoder", "t5")
    assert "finished: span_corruption on t5," in out.stdout
    from selfsup.interop.export import main as export

    export([str(run), str(tmp_path / "hf")])
    p = selfsup.load(run)
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert type(hf).__name__ == "T5ForConditionalGeneration" and hf.lm_head.weight is not hf.shared.weight
    first = p.vocab.sentinel_start
    assert tokenizer.convert_ids_to_tokens([first, first + 1]) == ["<extra_id_0>", "<extra_id_1>"]
    enc = torch.tensor([p.encode("The <extra_id_0> of the module returns a list")])
    dec = torch.tensor([[p.vocab.bos_id, first] + p.encode("value")])
    with torch.no_grad():
        ours = p.model.head(p.model(encoder_inputs=enc, decoder_inputs=dec))[..., : p.vocab.size]
        theirs = hf(input_ids=enc, decoder_input_ids=dec).logits
    assert (ours - theirs).abs().max() <= 1e-4
    assert list(p.fill_spans("The <extra_id_0> of the module", 4)) == ["<extra_id_0>"]
