"""Zero-shot minimal pairs: each family's score against a direct per-sentence loop, ties, the built-in set,
user sets in BLiMP's layout, the n-gram references, the random-init cache, bad input."""

import csv
import json
import math
import os
from pathlib import Path

import forked
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from selfsup.data.builtin import builtin_documents
from selfsup.data.vocab import Vocab
from selfsup.evaluation import EvalError, MinimalPairs, PairSource
from selfsup.evaluation import pair_sets as P
from selfsup.evaluation import scoring as S
from selfsup.models import build_model
from selfsup.run.settings import RunSettings

V = Vocab(size=120, n_sentinels=4)


def sentences(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(V.first_ordinary, V.size, (int(torch.randint(1, 9, (1,), generator=g)),), generator=g).tolist()
        for _ in range(n)
    ]


def trained_like(arch, seed=0):
    """A small model far from its initialisation (weights scaled up), so scores differ clearly."""
    torch.manual_seed(seed)
    model = build_model(arch, V.size, 24, d_model=32, n_layers=2, n_heads=2)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    return model.eval()


def logp(model, hidden, target):
    return model.head(hidden[None])[0, : V.size].float().log_softmax(-1)[target].item()


# ---------------------------------------------------------------------------------------- each family's scorer
def test_decoder_score_is_summed_log_probability_after_the_document_start():
    model, ss = trained_like("decoder"), sentences()
    got = S.score_rows(model, S.decoder_rows(ss, V), len(ss), V.pad_id, batch_tokens=40)
    for s, ids in zip(got, ss):
        inputs = torch.tensor([[V.eos_id, *ids]])
        hidden = model(decoder_inputs=inputs)[0]
        assert s == pytest.approx(sum(logp(model, hidden[i], t) for i, t in enumerate(ids)), abs=1e-4)


def test_encoder_score_is_pseudo_log_likelihood_each_token_masked_in_turn():
    model, ss = trained_like("encoder"), sentences()
    got = S.score_rows(model, S.encoder_rows(ss, V), len(ss), V.pad_id, batch_tokens=64)
    for s, ids in zip(got, ss):
        total = 0.0
        for i, t in enumerate(ids):
            row = [V.eos_id, *ids, V.eos_id]
            row[i + 1] = V.mask_id
            total += logp(model, model(encoder_inputs=torch.tensor([row]))[0, i + 1], t)
        assert s == pytest.approx(total, abs=1e-4)


def test_encoder_decoder_blank_score_is_the_decoder_given_a_blank_encoder_input():
    model, ss = trained_like("encoder_decoder"), sentences()
    got = S.score_rows(model, S.blank_rows(ss, V), len(ss), V.pad_id, batch_tokens=40)
    for s, ids in zip(got, ss):
        hidden = model(encoder_inputs=torch.tensor([[V.eos_id]]), decoder_inputs=torch.tensor([[V.bos_id, *ids]]))[0]
        assert s == pytest.approx(sum(logp(model, hidden[i], t) for i, t in enumerate(ids)), abs=1e-4)


@pytest.mark.parametrize("span", [1, 3])
def test_denoise_score_scores_each_token_inside_its_span_given_the_span_so_far(span):
    """Token by token: token i lies in the span starting at i - i % span; the encoder reads the sentence with
    that span replaced by <extra_id_0>, the decoder <s> <extra_id_0> and the span's tokens before i."""
    model, ss = trained_like("encoder_decoder"), sentences()
    got = S.score_rows(model, S.denoise_rows(ss, V, span), len(ss), V.pad_id, batch_tokens=50)
    s0 = V.sentinel(0)
    for s, ids in zip(got, ss):
        total = 0.0
        for i, t in enumerate(ids):
            start = i - i % span
            encoder = [V.eos_id, *ids[:start], s0, *ids[start + span :], V.eos_id]
            decoder = [V.bos_id, s0, *ids[start:i]]
            hidden = model(encoder_inputs=torch.tensor([encoder]), decoder_inputs=torch.tensor([decoder]))[0]
            total += logp(model, hidden[-1], t)
        assert s == pytest.approx(total, abs=1e-4)


def test_batching_does_not_change_scores():
    model, ss = trained_like("encoder"), sentences(30, seed=1)
    rows = S.encoder_rows(ss, V)
    one = S.score_rows(model, rows, len(ss), V.pad_id, batch_tokens=1)
    many = S.score_rows(model, rows, len(ss), V.pad_id, batch_tokens=100_000)
    np.testing.assert_allclose(one, many, atol=1e-4)


# ---------------------------------------------------------------------------------------- accuracy and ties
def test_ties_count_one_half():
    good = np.array([-1.0, -2.0, -3.0, -4.0])
    assert S.accuracy(good, good).tolist() == [0.5] * 4
    assert S.accuracy(good, good - 1).tolist() == [1.0] * 4
    assert S.accuracy(good, good + 1).tolist() == [0.0] * 4
    assert S.accuracy(good, good + 1e-9).tolist() == [0.5] * 4  # float noise is a tie


def word_tokenizer(words):
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


WORDS = [f"<{i}>" for i in range(V.first_ordinary)] + "the cat sat on a mat dog ran far away quickly slowly".split()


def pairs_of(good, bad, name="mine", groups=None):
    pairs = MinimalPairs(builtin=False, random_init_seeds=2)
    pairs.pair_sets = [P.PairSet(name, list(good), list(bad), list(groups or []))]
    return pairs


def test_a_model_scored_against_itself_gives_one_half():
    """Pairs whose two sentences are the same token ids (here: extra spaces) are exact ties for every scorer."""
    tok = word_tokenizer(WORDS)
    vocab = Vocab(size=len(WORDS), n_sentinels=4)
    good = ["the cat sat on a mat", "a dog ran far away", "the dog sat quickly"]
    for arch in ("decoder", "encoder", "encoder_decoder"):
        pairs = pairs_of(good, [s.replace(" ", "  ") for s in good])
        pairs.setup(arch, vocab, tok, 24)
        model = build_model(arch, vocab.size, 24, d_model=32, n_layers=1, n_heads=2)
        out = pairs(model)
        assert out["eval/pairs/mine/accuracy"] == 0.5
        if arch == "encoder_decoder":
            assert out["eval/pairs/denoise/mine/accuracy"] == 0.5


# ---------------------------------------------------------------------------------------- the built-in set
def test_builtin_pairs_are_held_out_minimal_pairs_of_each_type():
    ps = P.builtin_pairs(1000)
    assert {g: ps.groups.count(g) for g in P.PAIR_TYPES} == {g: 1000 for g in P.PAIR_TYPES}
    pretraining = " ".join(" ".join(d.split()) for d in builtin_documents())
    assert not [s for s in set(ps.good) | set(ps.bad) if s in pretraining]  # never in the pretraining corpus
    for good, bad, kind in zip(ps.good, ps.bad, ps.groups):
        g, b = good.split(), bad.split()
        assert len(g) == len(b) and 6 <= len(g) <= 12 and g[0] == b[0]
        changed = [i for i in range(len(g)) if g[i] != b[i]]
        if kind == "swap_1":
            assert len(changed) == 2 and changed[1] == changed[0] + 1 and g[changed[0]] == b[changed[1]]
        else:
            assert len(changed) == int(kind[-1])
    assert P.builtin_pairs(1000).bad == ps.bad  # deterministic


# ---------------------------------------------------------------------------------------- references
def test_ngram_references_are_counts_of_the_training_tokens():
    tokens = np.array([2, 10, 11, 12, 2, 10, 11, 2, 12, 10], dtype=np.uint16)
    counts = S.NGram(tokens, vocab_size=20)
    n, v = len(tokens), 20
    unigram = lambda t: (np.sum(tokens == t) + 1) / (n + v)  # noqa: E731
    assert counts.score([[10, 11]], eos_id=2, order=1)[0] == pytest.approx(math.log(unigram(10) * unigram(11)))
    # bigram: 0.8 * c(prev, t) / c(prev) + 0.2 * unigram(t), the first token after </s>
    after_eos = 0.8 * 2 / 3 + 0.2 * unigram(10)  # (2, 10) twice, </s> 3 times as a context
    after_10 = 0.8 * 2 / 2 + 0.2 * unigram(11)  # (10, 11) twice, 10 twice as a context (the last token is none)
    assert counts.score([[10, 11]], eos_id=2, order=2)[0] == pytest.approx(math.log(after_eos * after_10))
    never = 0.8 * 0 / 3 + 0.2 * unigram(13)  # a pair never seen after a seen context: the unigram share
    assert counts.score([[13]], eos_id=2, order=2)[0] == pytest.approx(math.log(never))


# ---------------------------------------------------------------------------------------- user sets
def blimp_file(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


BLIMP = [
    {"sentence_good": "the cat sat on a mat", "sentence_bad": "the cat sat a on mat", "UID": "order"},
    {"sentence_good": "a dog ran far away", "sentence_bad": "a dog far ran away", "UID": "order"},
    {"sentence_good": "the dog ran quickly", "sentence_bad": "the mat ran quickly", "UID": "agent"},
    {"sentence_good": "a cat sat slowly", "sentence_bad": "a cat mat slowly", "UID": "agent"},
    {"sentence_good": "the cat ran away", "sentence_bad": "the away ran cat", "UID": "agent"},
]


@pytest.mark.parametrize("how", ["text_files", "hf_dataset"])
def test_a_user_set_in_blimp_layout_with_groups(tmp_path, how):
    path = blimp_file(tmp_path / "blimp.jsonl", BLIMP)
    source = (
        PairSource(paths=[str(path)], group_field="UID")
        if how == "text_files"
        else PairSource(source="hf_dataset", hf_name="json", data_files={"train": [str(path)]}, group_field="UID")
    )
    tok = word_tokenizer(WORDS)
    vocab = Vocab(size=len(WORDS), n_sentinels=4)
    pairs = MinimalPairs(builtin=False, sets={"blimp": source}, random_init_seeds=2)
    pairs.check()
    pairs.setup(
        "decoder",
        vocab,
        tok,
        24,
        train_tokens=np.arange(7, len(WORDS)).repeat(3),
        make_model=lambda: build_model("decoder", vocab.size, 24, d_model=32, n_layers=1, n_heads=2),
    )
    torch.manual_seed(0)
    model = build_model("decoder", vocab.size, 24, d_model=32, n_layers=1, n_heads=2)
    out = pairs(model)
    ids = [e.ids for e in tok.encode_batch([r[k] for r in BLIMP for k in ("sentence_good", "sentence_bad")])]
    s = S.score_rows(model, S.decoder_rows(ids, vocab), len(ids), vocab.pad_id)
    won = [float(s[2 * i] > s[2 * i + 1]) for i in range(len(BLIMP))]
    assert out["eval/pairs/blimp/accuracy"] == pytest.approx(np.mean(won))
    assert out["eval/pairs/blimp/order/accuracy"] == pytest.approx(np.mean(won[:2]))
    assert out["eval/pairs/blimp/agent/accuracy"] == pytest.approx(np.mean(won[2:]))
    for key in (
        "random_init_accuracy",
        "random_init_accuracy_sd",
        "unigram_accuracy",
        "bigram_accuracy",
        "order/random_init_accuracy",
        "agent/bigram_accuracy",
    ):
        assert 0 <= out[f"eval/pairs/blimp/{key}"] <= 1
    assert "eval/pairs/accuracy" not in out  # the built-in set is off


@pytest.mark.parametrize(
    "rows,setup,words",
    [
        ([{"sentence_good": "a b"}], {}, ["no field 'sentence_bad' in record 1", "bad_field"]),
        ([{"sentence_good": "the cat", "sentence_bad": "the  cat"}], {}, ["pair 1 has the same good and bad sentence"]),
        ([{"sentence_good": "", "sentence_bad": "the cat"}], {}, ["pair 1 has an empty"]),
        ([], {}, ["no field 'sentence_good'"]),
        (
            [{"good": "a b", "bad": "b a"}],
            {"good_field": "good", "bad_field": "bad", "group_field": "UID"},
            ["no field 'UID' in record 1", "group_field"],
        ),
    ],
)
def test_bad_user_sets_are_one_line(tmp_path, rows, setup, words):
    path = blimp_file(tmp_path / "p.jsonl", rows)
    with pytest.raises(EvalError) as err:
        MinimalPairs(builtin=False, sets={"mine": PairSource(paths=[str(path)], **setup)}).check()
    assert "\n" not in str(err.value)
    for w in words:
        assert w in str(err.value)


def test_a_missing_pair_file_and_a_reserved_name_are_one_line(tmp_path):
    with pytest.raises(EvalError, match="does not exist"):
        MinimalPairs(builtin=False, sets={"mine": PairSource(paths=[str(tmp_path / "nope.jsonl")])}).check()
    path = blimp_file(tmp_path / "p.jsonl", BLIMP)
    with pytest.raises(EvalError, match="not one of"):
        MinimalPairs(builtin=False, sets={"swap_1": PairSource(paths=[str(path)])}).check()


# ---------------------------------------------------------------------------------------- random-init baselines
def test_random_init_baselines_are_cached_per_shape_and_seed(tmp_path, caplog):
    tok = word_tokenizer(WORDS)
    vocab = Vocab(size=len(WORDS), n_sentinels=4)
    path = blimp_file(tmp_path / "p.jsonl", BLIMP)

    def run(d_model):
        pairs = MinimalPairs(builtin=False, sets={"b": PairSource(paths=[str(path)])}, random_init_seeds=3)
        pairs.setup(
            "encoder",
            vocab,
            tok,
            24,
            make_model=lambda: build_model("encoder", vocab.size, 24, d_model=d_model, n_layers=1, n_heads=2),
            cache_dir=tmp_path / "cache",
        )
        torch.manual_seed(0)
        return pairs(build_model("encoder", vocab.size, 24, d_model=d_model, n_layers=1, n_heads=2))

    first = run(32)
    files = sorted((tmp_path / "cache" / "pairs-random-init").iterdir())
    assert len(files) == 3  # one per seed
    stamps = [f.stat().st_mtime_ns for f in files]
    assert run(32) == first  # the same baselines, read back
    assert [f.stat().st_mtime_ns for f in files] == stamps
    run(16)  # another shape: its own entries
    assert len(list((tmp_path / "cache" / "pairs-random-init").iterdir())) == 6
    np.save(files[0], np.zeros(2))  # a damaged entry is computed again, said in one line
    assert run(32) == first
    damaged = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert damaged == [
        f"{files[0]}: a damaged random-init cache entry (it does not fit what it should hold): computed again"
    ]
    assert np.load(files[0]).shape != (2,)  # replaced


# ---------------------------------------------------------------------------------------- through selfsup-train
EXAMPLE_SET = Path(__file__).parents[2] / "docs" / "examples" / "pairs.jsonl"


# a run trained with a user set (~9 s); the default suite reads user sets and refuses bad ones in-process (above)
@pytest.mark.slow
def test_a_run_scores_a_user_set_by_group_and_refuses_a_bad_one_before_writing(cache_dir, tmp_path):
    env = {**os.environ, "WANDB_MODE": "offline"}
    common = ["selfsup-train", "debug=tiny", "logger=csv", "eval.tasks=null", f"data.cache_dir={cache_dir}"]
    out = forked.run(
        [
            *common,
            f"hydra.run.dir={tmp_path / 'run'}",
            "trainer.progress_bar=true",
            f"+eval.pairs.sets.mine={{paths: [{EXAMPLE_SET}], group_field: UID}}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    groups = {json.loads(line)["UID"] for line in EXAMPLE_SET.read_text().splitlines()}
    keys = {k for k in summary["eval"] if k.startswith("eval/pairs/mine/") and k.endswith("/accuracy")}
    assert keys == {"eval/pairs/mine/accuracy", *(f"eval/pairs/mine/{g}/accuracy" for g in groups)}
    assert summary["pairs_scorers"]["eval/pairs/mine"] == "pseudo-log-likelihood"
    assert "eval/pairs/accuracy" in summary["eval"] and "eval/pairs/mine/random_init_accuracy" in summary["eval"]
    with open(tmp_path / "run" / "csv" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("eval/pairs/mine/accuracy")]
    assert len(rows) == 1 and float(rows[0]["eval/pairs/mine/accuracy"]) == pytest.approx(
        summary["eval"]["eval/pairs/mine/accuracy"]
    )
    shown = f"pairs mine {summary['eval']['eval/pairs/mine/accuracy']:.3f} (pseudo-log-likelihood)"
    assert shown in out.stdout and shown in out.stderr  # the run's last lines and the evaluation's line

    bad = forked.run(
        [
            *common,
            f"hydra.run.dir={tmp_path / 'refused'}",
            f"+eval.pairs.sets.mine={{paths: [{tmp_path / 'nope.jsonl'}]}}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines()[-1].startswith("error: eval.pairs.sets.mine.paths: ")
    assert "does not exist" in bad.stderr and not (tmp_path / "refused").exists()


FIX = "convert it to UTF-8 or remove it from eval.pairs.sets.mine.paths"


@pytest.mark.parametrize(
    "name,content,words",
    [
        (
            "nul.jsonl",
            b'{"sentence_good": "a\x00b", "sentence_bad": "b a"}\n',
            ["looks binary (it holds NUL bytes), not text: remove it from eval.pairs.sets.mine.paths"],
        ),
        ("latin1.jsonl", '{"sentence_good": "café b", "sentence_bad": "b a"}\n'.encode("latin-1"), ["offset 22", FIX]),
        ("latin1.csv", "sentence_good,sentence_bad\ncafé b,b a\n".encode("latin-1"), ["offset 30", FIX]),
        ("list.jsonl", b'["a b", "b a"]\n', ["p/list.jsonl:1: a JSON list, not an object", "'sentence_good'"]),
    ],
)
def test_pair_files_are_read_as_training_text_is(tmp_path, name, content, words):
    """The same reader as data.paths (selfsup.data.sources): one EvalError line naming the pair set's setting."""
    (tmp_path / "p").mkdir()
    path = tmp_path / "p" / name
    path.write_bytes(content)
    with pytest.raises(EvalError) as err:
        MinimalPairs(builtin=False, sets={"mine": PairSource(paths=[str(path)])}).check()
    assert "\n" not in str(err.value)
    for w in words:
        assert w in str(err.value)


def test_a_set_whose_every_pair_is_too_long_is_refused_by_prepare(cache_dir, tmp_path):
    """prepare() is what RunDirGuard runs before Hydra writes anything: the refusal leaves no run dir."""
    from helpers import train_config

    from selfsup.evaluation import EvalError
    from selfsup.run.build import prepare

    long = " ".join(["word"] * 200)
    (tmp_path / "long.jsonl").write_text(
        json.dumps({"sentence_good": f"a {long}", "sentence_bad": f"an {long}"}) + "\n"
    )
    cfg = train_config(
        "debug=tiny",
        "eval.tasks=null",
        "eval.pairs.builtin=false",
        f"data.cache_dir={cache_dir}",
        f"+eval.pairs.sets.mine={{paths: [{tmp_path / 'long.jsonl'}]}}",
    )
    with pytest.raises(EvalError, match="^eval.pairs: every pair has a sentence longer than the model's 30 positions"):
        prepare(RunSettings.of(cfg))
