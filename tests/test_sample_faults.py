"""selfsup-sample and selfsup.load(...).generate/fill_spans on bad input and at the model's limits, with a tiny
checkpoint written in-process (random weights, no training): a prefix-LM decoder generates with the prompt as its
bidirectional prefix, bad sampling settings are refused in one line, and max_new_tokens is capped at the positions
the model has, with one note."""

import math
import warnings

import pytest
import torch

import selfsup
from selfsup.errors import UserError
from selfsup.models import TransformerConfig

WORDS = [
    "the",
    "module",
    "returns",
    "a",
    "list",
    "of",
    "files",
    "in",
    "the",
    "folder",
    "and",
    "each",
    "file",
    "holds",
    "text",
    "about",
    "one",
    "subject",
]
DOCS = [" ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(12 + i % 9)) + "." for i in range(120)]
PROMPTS = [
    "the module",
    "a list of files",
    "each file holds",
    "text about one",
    "the folder and",
    "one subject",
    "files in the",
    "holds text",
    "about the module returns",
    "a file",
]


def tiny_checkpoint(path, objective, architecture="decoder", max_len=16, seed=0):
    """A checkpoint as selfsup-train writes one (weights, settings, tokenizer) of a 2-layer model with random
    weights far from init (so the attention mask shows in the logits)."""
    from selfsup.data.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(DOCS, vocab_size=400, n_sentinels=4)
    shape = {"name": architecture, "d_model": 32, "n_layers": 2, "n_heads": 2}
    torch.manual_seed(seed)
    model = TransformerConfig(**shape).build(tokenizer.get_vocab_size(), max_len)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.5 * torch.randn_like(param))
    record = {
        "config": {"objective": {"name": objective}, "architecture": shape, "data": {"n_sentinels": 4}, "seed": seed},
        "vocab_size": tokenizer.get_vocab_size(),
        "tokenizer": tokenizer.to_str(),
    }
    torch.save({"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()}, "selfsup": record}, path)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("sample")
    return {
        name: tiny_checkpoint(root / f"{name}.ckpt", objective, architecture)
        for name, objective, architecture in (
            ("prefix", "prefix_lm", "decoder"),
            ("clm", "clm", "decoder"),
            ("span", "span", "encoder_decoder"),
        )
    }


def next_token_logits(p, ids, prefix_length=None):
    with torch.no_grad():
        hidden = p.model(decoder_inputs=torch.tensor([ids]), prefix_length=prefix_length)
        return p.model.head(hidden[0, -1])[: p.vocab.size].float()


def greedy_first(p, logits):
    """The token greedy generation picks from logits (None when it would stop: end of document)."""
    if int(logits.argmax()) == p.vocab.eos_id:
        return None
    logits = logits.clone()
    logits[: p.vocab.first_ordinary] = float("-inf")
    return int(logits.argmax())


def reference_continuation(p, prompt, n, prefix):
    """Greedy generation written out: the prompt (after an end of document) is the bidirectional prefix when
    `prefix`, the tokens after it are causal."""
    prompt_ids = p.encode(prompt)
    ids = [p.vocab.eos_id, *prompt_ids]
    prefix_length = len(ids) if prefix else None
    new = []
    for _ in range(n):
        token = greedy_first(p, next_token_logits(p, ids, prefix_length))
        if token is None:
            break
        ids.append(token)
        new.append(token)
    before, after = p.decode(prompt_ids), p.decode(prompt_ids + new)
    return after[len(before) :] if after.startswith(before) else p.decode(new)


# ---------------------------------------------------------------- (a) a prefix-LM decoder generates as it was trained
def test_a_prefix_lm_decoder_generates_with_the_prompt_as_its_bidirectional_prefix(checkpoints):
    p = selfsup.load(checkpoints["prefix"])
    differing = [
        prompt
        for prompt in PROMPTS
        if reference_continuation(p, prompt, 6, prefix=True) != reference_continuation(p, prompt, 6, prefix=False)
    ]
    assert differing, "no prompt whose greedy continuation depends on the mask: the test shows nothing"
    for prompt in PROMPTS:
        assert p.generate(prompt, 6) == reference_continuation(p, prompt, 6, prefix=True), prompt
    for prompt in PROMPTS:
        ids = [p.vocab.eos_id, *p.encode(prompt)]
        prefix, causal = next_token_logits(p, ids, len(ids)), next_token_logits(p, ids)
        assert (prefix - causal).abs().max() > 1e-3  # the mask matters for this model
        assert torch.allclose(p.next_token_logits(prompt), prefix, atol=1e-5)  # what generate picks from
        assert not torch.allclose(p.next_token_logits(prompt), causal, atol=1e-3)


def test_a_causal_decoder_still_generates_causally(checkpoints):
    p = selfsup.load(checkpoints["clm"])
    for prompt in PROMPTS[:4]:
        ids = [p.vocab.eos_id, *p.encode(prompt)]
        assert torch.allclose(p.next_token_logits(prompt), next_token_logits(p, ids), atol=1e-5)
        assert p.generate(prompt, 6) == reference_continuation(p, prompt, 6, prefix=False)


# ---------------------------------------------------------------- (b) bad sampling settings: one line, exit 2
@pytest.mark.parametrize(
    "option,value,says",
    [
        ("--temperature", "-1", "--temperature"),
        ("--temperature", "nan", "--temperature"),
        ("--temperature", "inf", "--temperature"),
        ("--top-k", "-1", "--top-k"),
        ("--max-new-tokens", "-1", "--max-new-tokens"),
    ],
)
def test_sample_refuses_bad_sampling_settings_in_one_line(checkpoints, capsys, option, value, says):
    from selfsup.tools.sample import main as sample

    with pytest.raises(SystemExit) as exit_info:
        sample([str(checkpoints["prefix"]), "--prompt", "the module", "--max-new-tokens", "2", option, value])
    assert exit_info.value.code == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert "error:" in lines[-1] and says in lines[-1] and value in lines[-1]
    assert "Traceback" not in err and "decoder from" not in out  # refused before loading the model


def test_sample_samples_at_temperature_0_8_from_the_top_200_and_greedy_takes_the_argmax(checkpoints, capsys):
    from selfsup.tools.sample import main as sample

    p = selfsup.load(checkpoints["clm"])
    command = [str(checkpoints["clm"]), "--prompt", "the module", "--max-new-tokens", "8"]
    texts = []
    for seed in range(5):
        sample([*command, "--seed", str(seed)])
        texts.append(capsys.readouterr().out.splitlines()[-1])
        assert texts[-1] == "the module" + p.generate("the module", 8, temperature=0.8, top_k=200, seed=seed)
    assert len(set(texts)) > 1  # sampled: seeds differ (8 tokens: this model's first is one token at p = 0.98)
    sample([*command, "--greedy", "--seed", "3"])
    assert capsys.readouterr().out.splitlines()[-1] == "the module" + p.generate("the module", 8)  # argmax
    with pytest.raises(SystemExit) as exit_info:
        sample([*command, "--greedy", "--temperature", "0.5"])
    err = capsys.readouterr().err
    assert (
        exit_info.value.code == 2
        and err.startswith("error: --greedy and --temperature 0.5")
        and len(err.splitlines()) == 1
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -1.0},
        {"temperature": math.nan},
        {"temperature": math.inf},
        {"top_k": -1},
        {"max_new_tokens": -1},
    ],
)
def test_generate_refuses_bad_sampling_settings(checkpoints, kwargs):
    p = selfsup.load(checkpoints["clm"])
    name = next(iter(kwargs))
    with pytest.raises(UserError, match=name):
        p.generate("the module", **{"max_new_tokens": 2, **kwargs})


def test_top_k_0_samples_from_every_token_and_0_new_tokens_writes_nothing(checkpoints):
    p = selfsup.load(checkpoints["clm"])
    assert p.generate("the module", 4, temperature=1.0, top_k=0, seed=1) == p.generate(
        "the module", 4, temperature=1.0, top_k=None, seed=1
    )
    assert p.generate("the module", 0) == ""


# ---------------------------------------------------------------- (c) max_new_tokens beyond the model's positions
def test_generate_caps_max_new_tokens_at_the_models_positions_with_a_warning(checkpoints):
    p = selfsup.load(checkpoints["prefix"])
    prompt = "the module returns"
    limit = p.generation_limit(prompt)
    assert limit == p.model.max_len - len(p.encode(prompt)) > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        full = p.generate(prompt, limit, temperature=1.0, seed=0)  # no warning up to the limit
    with pytest.warns(UserWarning, match=rf"max_new_tokens={limit + 5}.*{limit}"):
        assert p.generate(prompt, limit + 5, temperature=1.0, seed=0) == full


def test_sample_caps_max_new_tokens_with_one_note_line(checkpoints, capsys):
    from selfsup.tools.sample import main as sample

    p = selfsup.load(checkpoints["prefix"])
    limit = p.generation_limit("the module")
    sample(
        [
            str(checkpoints["prefix"]),
            "--prompt",
            "the module",
            "--max-new-tokens",
            "100000",
            "--temperature",
            "1",
            "--seed",
            "2",
        ]
    )
    out, err = capsys.readouterr()
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "100000" in notes[0] and str(limit) in notes[0] and str(p.model.max_len) in notes[0]
    assert "Warning" not in err
    assert out.splitlines()[-1] == "the module" + p.generate("the module", limit, 1.0, seed=2)


def test_a_prompt_longer_than_the_model_reads_is_refused(checkpoints, capsys):
    from selfsup.tools.sample import main as sample

    p = selfsup.load(checkpoints["clm"])
    prompt = " ".join(WORDS)  # more tokens than the 16 positions
    assert len(p.encode(prompt)) >= p.model.max_len
    with pytest.raises(UserError, match=str(p.model.max_len)):
        p.generate(prompt, 2)
    with pytest.raises(SystemExit) as exit_info:
        sample([str(checkpoints["clm"]), "--prompt", prompt, "--max-new-tokens", "2"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("error:") and "Traceback" not in err


def test_fill_spans_caps_max_new_tokens_at_the_decoders_positions(checkpoints):
    p = selfsup.load(checkpoints["span"])
    text = "the <extra_id_0> of the <extra_id_1> holds"
    limit = p.generation_limit(text)
    assert limit == p.model.max_len
    with pytest.warns(UserWarning, match=rf"max_new_tokens=1000.*{limit}"):
        capped = p.fill_spans(text, 1000)
    assert capped == p.fill_spans(text, limit)
    with pytest.raises(UserError, match="max_new_tokens"):
        p.fill_spans(text, -1)
