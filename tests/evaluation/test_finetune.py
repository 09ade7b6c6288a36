"""Downstream fine-tuning: sentence pairs read as each family was pretrained (joined, cut longest-first as Hugging
Face tokenizers do), the state each family is classified from, GLUE's and SuperGLUE's layouts, the built-in pair
task, fine-tuning seeds in the margin's interval, and a fine-tune that leaves the run's model and RNG untouched."""

import itertools

import numpy as np
import pytest
import torch
from helpers import write_records
from hydra import compose, initialize_config_dir

from selfsup.common.names import OUTCOMES
from selfsup.data.builtin import builtin_documents, stdlib_docstrings
from selfsup.evaluation import EvalError, Task
from selfsup.evaluation.builtin import next_sentence_examples, sentences
from selfsup.evaluation.probe import batches, classified, encode
from selfsup.evaluation.stats import difference, margin
from selfsup.models.transformer import build_model
from selfsup.results.verdict import verdict_text
from selfsup.run.build import build, prepare
from selfsup.run.cli import CONF_DIR
from selfsup.run.schema import register
from selfsup.run.settings import RunSettings

TINY = ["debug=tiny", "eval.pairs=null", "eval.heldout=null", "eval.fixed=null"]


def config(cache_dir, *overrides):
    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return compose("train", overrides=[*TINY, f"data.cache_dir={cache_dir}", *overrides])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    corpus, _, _ = prepare(RunSettings.of(config(tmp_path_factory.mktemp("cache"))))
    return corpus


# ---------------------------------------------------------------------------------------- reading a pair
def longest_first(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
    """The tokenizers library's longest-first rule (tokenizers/src/utils/truncation.rs): the shorter kept whole
    if the longer can take the rest, else both cut to budget // 2, the longer keeping the odd one (the second on
    a tie)."""
    if len(a) + len(b) <= budget:
        return a, b
    short, long_ = sorted((len(a), len(b)))
    n_short, n_long = short, max(short, budget - short)
    if n_short + n_long > budget:
        n_short, n_long = budget // 2, budget // 2 + budget % 2
    n_a, n_b = (n_long, n_short) if len(a) > len(b) else (n_short, n_long)
    return a[:n_a], b[:n_b]


def transformers_longest_first(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
    """transformers' Python tokenizers' longest-first truncation (PythonBackend.truncate_sequences)."""
    from types import SimpleNamespace

    try:
        from transformers.tokenization_python import PythonBackend
    except ImportError:  # transformers 4: the method of the tokenizers' base class
        from transformers import PreTrainedTokenizerBase as PythonBackend

    remove = len(a) + len(b) - budget
    cut_a, cut_b, _ = PythonBackend.truncate_sequences(SimpleNamespace(truncation_side="right"), a, b, remove)
    return cut_a, cut_b


def test_the_longest_first_rule_is_transformers_where_the_shorter_fits_in_half():
    for n_a, n_b, budget in itertools.product(range(0, 12), range(0, 12), range(1, 20)):
        if min(n_a, n_b) <= budget // 2:  # the shorter kept whole, the longer cut to the rest
            a, b = list(range(n_a)), list(range(100, 100 + n_b))
            assert longest_first(a, b, budget) == transformers_longest_first(a, b, budget), (n_a, n_b, budget)
    # both cut: the tokenizers library (transformers' default, fast tokenizers) gives the longer the odd token, the
    # second on a tie; transformers' Python tokenizers may give it to the other
    assert longest_first(list(range(10)), list(range(10)), 7) == (list(range(3)), list(range(3 + 1)))
    assert transformers_longest_first(list(range(10)), list(range(10)), 7) == (list(range(4)), list(range(3)))
    assert longest_first(list(range(10)), list(range(8)), 7) == (list(range(4)), list(range(3)))


@pytest.mark.parametrize("family", ["encoder", "decoder", "encoder_decoder"])
def test_a_pair_is_joined_with_eos_and_cut_longest_first_as_hugging_face_does(corpus, family):
    tok, vocab = corpus.tokenizer, corpus.vocab
    a = "The module provides functions for reading and writing files in several formats."
    b = "It returns a list."
    ids_a, ids_b = (tok.encode(t, add_special_tokens=False).ids for t in (a, b))
    lead = [vocab.eos_id] if family == "encoder" else []
    specials = len(lead) + 2
    for max_length in (64, len(ids_a) + len(ids_b) + specials, 15, 12, 11, 9):
        (ids, mask) = encode(tok, [(a, b), a], max_length, vocab.pad_id, vocab.eos_id, family)
        cut_a, cut_b = longest_first(ids_a, ids_b, max_length - specials)
        expected = lead + cut_a + [vocab.eos_id] + cut_b + [vocab.eos_id]
        assert ids[0, : mask[0].sum()].tolist() == expected, max_length
        assert (ids[0, mask[0].sum() :] == vocab.pad_id).all() and not mask[0, len(expected) :].any()
        single = lead + ids_a[: max_length - len(lead) - 1] + [vocab.eos_id]
        assert ids[1, : mask[1].sum()].tolist() == single
    tie = "one two three four five six seven eight"
    (ids, mask) = encode(tok, [(tie, tie)], 9 + len(lead), vocab.pad_id, vocab.eos_id, family)
    n = len(tok.encode(tie, add_special_tokens=False).ids)
    cut_a, cut_b = longest_first(list(range(n)), list(range(n)), 7)
    assert (
        ids[0, : mask[0].sum()].tolist().index(vocab.eos_id, len(lead))
        == len(lead) + len(cut_a)
        < len(cut_b) + len(lead)
    )


# ---------------------------------------------------------------------------------------- the classified state
@pytest.mark.parametrize("family", ["encoder", "decoder", "encoder_decoder"])
def test_each_family_is_classified_from_the_state_its_pooling_names(family):
    torch.manual_seed(0)
    model = build_model(family, 50, 32, d_model=32, n_layers=2, n_heads=4).eval()
    bos, eos, pad = 1, 2, 0
    rows = [[5, 6, 7, eos, 8, 9, eos], [10, 11, eos]]
    ids = torch.full((2, 8), pad)
    mask = torch.zeros(2, 8, dtype=torch.bool)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), True
    with torch.no_grad():
        state = classified(model, ids, mask, "hf", bos)
        for i, row in enumerate(rows):  # each example alone, without padding
            alone = torch.tensor([row])
            if family == "encoder":  # the first token's state (BertForSequenceClassification)
                expected = model(encoder_inputs=alone)[0, 0]
            elif family == "decoder":  # the last token's (GPT2ForSequenceClassification)
                expected = model(decoder_inputs=alone)[0, -1]
            else:  # the decoder's at the final eos, its input shifted right behind bos (BartForSequenceClassification)
                shifted = torch.tensor([[bos, *row[:-1]]])
                expected = model(encoder_inputs=alone, decoder_inputs=shifted)[0, -1]
            torch.testing.assert_close(state[i], expected, atol=1e-5, rtol=1e-5)
        changed = ids.clone()
        changed[:, 1] = 13  # a token inside every example: the classified state reads the whole example
        assert not torch.allclose(classified(model, changed, mask, "hf", bos), state)
        mean = classified(model, ids, mask, "mean", bos)
        assert mean.shape == state.shape and not torch.allclose(mean, state)
        for i, row in enumerate(rows):  # the mean of the states of the stack that reads the whole example
            alone = torch.tensor([row])
            states = model(decoder_inputs=alone) if family == "decoder" else model(encoder_inputs=alone)
            torch.testing.assert_close(mean[i], states[0].mean(0), atol=1e-5, rtol=1e-5)
        # auto: the encoder's transformers' state; the decoder's mean (measured better: docs/evaluation.md) and the
        # encoder-decoder's (as good, and its encoder alone: half the cost)
        torch.testing.assert_close(
            classified(model, ids, mask, "auto", bos), state if family == "encoder" else mean, atol=0, rtol=0
        )


def test_fine_tuning_batches_are_uniform_draws_grouped_by_length():
    lengths = torch.randint(1, 129, (1000,), generator=torch.Generator().manual_seed(1))
    drawn = list(batches(lengths, 120, 32, torch.Generator().manual_seed(0)))
    assert len(drawn) == 120 and all(b.shape == (32,) for b in drawn)
    again = list(batches(lengths, 120, 32, torch.Generator().manual_seed(0)))
    assert all(torch.equal(a, b) for a, b in zip(drawn, again))  # the seed fixes every batch
    # each batch cut to its longest: padding ~1.1x the tokens where uniform batches pad ~2x (max of 32 of U[1, 128]
    # is ~124, their mean 64.5)
    padded = sum(int(lengths[b].max()) * len(b) for b in drawn) / sum(int(lengths[b].sum()) for b in drawn)
    assert padded < 1.15
    # every example drawn about equally often: 3,840 draws of 1,000, counts Poisson(3.84): chi-square within 4 sigma
    counts = torch.bincount(torch.cat(drawn), minlength=1000).double()
    chi2 = float(((counts - 3.84) ** 2 / 3.84).sum())
    assert abs(chi2 - 999) < 4 * (2 * 999) ** 0.5
    # the batches' order is not the lengths' order (short and long batches mixed through the schedule)
    longest = torch.tensor([int(lengths[b].max()) for b in drawn[:50]])
    assert not torch.equal(longest, longest.sort().values)
    assert len(list(batches(lengths[:5], 3, 32, torch.Generator()))[0]) == 5  # fewer examples than a batch


# ---------------------------------------------------------------------------------------- GLUE's layouts
GLUE = {
    # name: (text fields, label of row i, the test split's name)
    "rte": (["sentence1", "sentence2"], lambda i: ["entailment", "not_entailment"][i % 2], "validation"),
    "mrpc": (["sentence1", "sentence2"], lambda i: i % 2, "validation"),
    "boolq": (["question", "passage"], lambda i: bool(i % 2), "validation"),
    "mnli": (["premise", "hypothesis"], lambda i: i % 3, "validation_matched"),
}


def glue_rows(name: str, split: str, n: int) -> list[dict]:
    fields, label, _ = GLUE[name]
    return [
        {
            fields[0]: f"{split} first text {i} of {name}",
            fields[1]: f"second text {i} here",
            "label": label(i),
            "idx": i,
        }
        for i in range(n)
    ]


@pytest.mark.parametrize("name,fmt", [*itertools.product(GLUE, ["jsonl", "csv", "parquet"]), ("mnli", "hf")])
def test_glue_and_superglue_layouts_read_as_they_are(tmp_path, name, fmt):
    fields, label, test_split = GLUE[name]
    classes = 3 if name == "mnli" else 2
    if fmt == "hf":
        pytest.importorskip("datasets")
        files = {s: write_records(tmp_path / f"{s}.parquet", glue_rows(name, s, 30)) for s in ("train", test_split)}
        task = Task(source="hf_dataset", hf_name="parquet", data_files=files, test_split=test_split, text_fields=fields)
    else:
        train = write_records(tmp_path / f"train.{fmt}", glue_rows(name, "train", 30), fmt)
        test = write_records(tmp_path / f"{test_split}.{fmt}", glue_rows(name, test_split, 30), fmt)
        task = Task(source="text_files", paths=[train], test_paths=[test], text_fields=fields)
    train, test = task.load()
    assert (len(train), len(test), len(task.classes)) == (30, 30, classes)
    assert task.is_pairs and train.texts[3] == (f"train first text 3 of {name}", "second text 3 here")
    assert test.texts[0][0].startswith(test_split)
    values = [label(i) for i in range(30)]
    expected = [str(v) for v in values] if fmt == "csv" else values  # CSV holds strings
    assert [task.classes[y] for y in train.labels] == [str(v) for v in expected]


@pytest.mark.parametrize(
    "rows,settings,message",
    [
        (  # STS-B: a regression label
            [{"sentence1": "a b", "sentence2": "c d", "label": 3.8}],
            {"text_fields": ["sentence1", "sentence2"]},
            "holds the number 3.8, not a class label: a regression task \\(such as GLUE's STS-B\\) cannot be classified",
        ),
        (
            [{"sentence1": f"a {i}", "sentence2": "c d", "label": 1} for i in range(20)],
            {"text_fields": ["sentence1", "sentence2"]},
            "every example has label 1: a task needs at least 2 classes",
        ),
        (
            [{"sentence1": "a b", "sentence2": "c d", "label": 1}],
            {"text_fields": ["sentence1", "hypothesis"]},
            "no field 'hypothesis' in record 1 .*: set eval.tasks.t.text_fields",
        ),
        (
            [{"a": "a b", "b": "c d", "c": "e", "label": 1}],
            {"text_fields": ["a", "b", "c"]},
            "eval.tasks.t.text_fields=\\['a', 'b', 'c'\\] must name one or two fields",
        ),
    ],
)
def test_bad_pair_tasks_are_one_line(tmp_path, rows, settings, message):
    path = write_records(tmp_path / "t.jsonl", rows)
    with pytest.raises(EvalError, match=message) as caught:
        Task(source="text_files", paths=[path], name="t", **settings).load()
    assert "\n" not in str(caught.value)


# ---------------------------------------------------------------------------------------- the built-in pair task
def test_the_builtin_pair_task_is_balanced_held_out_and_split_by_docstring():
    examples = next_sentence_examples(0.2)
    assert examples == next_sentence_examples(0.2) and len(examples) > 1000
    labels = [y for _, y, _, _ in examples]
    assert abs(sum(labels) - len(labels) / 2) <= 2  # balanced
    pretraining = set(s for doc in builtin_documents() for s in sentences(doc))
    assert not {s for (a, b), _, _, _ in examples for s in (a, b)} & pretraining
    neighbours = {}
    for doc in stdlib_docstrings()["held_out"]:
        for pair in itertools.pairwise(sentences(doc)):
            neighbours.setdefault(pair, set()).add(doc[:200])
    assert len({a for (a, _), _, _, _ in examples}) == len(examples)  # each sentence A once
    bs = [b for (_, b), _, _, _ in examples]
    assert len(set(bs)) == len(bs)  # each sentence B once: its identity cannot give the label away
    split_of = {}
    for (a, b), y, key, in_test in examples:
        if y == 1:
            assert key in neighbours[(a, b)]  # B follows A in the same docstring
        else:  # B from another docstring
            assert (a, b) not in neighbours
        split_of.setdefault(key, set()).add(in_test)
    assert all(len(v) == 1 for v in split_of.values())  # a docstring in one split
    negatives = [len(b.split()) for (_, b), y, _, _ in examples if y == 0]
    positives = [len(b.split()) for (_, b), y, _, _ in examples if y == 1]
    assert abs(np.mean(negatives) - np.mean(positives)) < 1.0  # B's length gives nothing away
    task = Task(source="builtin", task="next_sentence", max_train_examples=None, max_test_examples=None)
    train, test = task.load()
    assert task.is_pairs and len(train) + len(test) == len(examples) and 0.1 < len(test) / len(examples) < 0.3
    train_b, test_b = {b for _, b in train.texts}, {b for _, b in test.texts}
    test_sentences = {s for pair in test.texts for s in pair}
    assert not train_b & test_sentences and not test_b & {s for pair in train.texts for s in pair}
    assert abs(np.mean(test.labels) - 0.5) < 0.05


# ---------------------------------------------------------------------------------------- fine-tuning seeds
def test_fine_tuning_seeds_widen_the_margins_interval():
    rng = np.random.default_rng(0)
    random_init = (rng.random((3, 400)) < 0.5).astype(float)
    steady = np.stack([(rng.random(400) < 0.7).astype(float)] * 3)
    apart = np.stack([(rng.random(400) < p).astype(float) for p in (0.6, 0.7, 0.8)])
    for trained in (steady, apart):
        m = margin(trained, random_init)
        assert m.value == pytest.approx(trained.mean() - random_init.mean())
    one = margin(steady[0], random_init)
    assert margin(steady, random_init).high - margin(steady, random_init).low == pytest.approx(
        one.high - one.low, rel=0.15
    )  # identical seeds: as if one
    assert margin(apart, random_init).high - margin(apart, random_init).low > 1.3 * (one.high - one.low)
    d = difference(apart, random_init, steady, random_init)
    assert d.value == pytest.approx(apart.mean() - steady.mean())


def test_the_verdict_reads_fine_tuned_scores_with_their_seeds(tmp_path):
    rng = np.random.default_rng(1)
    random_init = (rng.random((3, 300)) < 0.5).astype(float)
    rows = []
    for objective, p in (("mlm", 0.85), ("clm", 0.6)):
        for seed in (0, 1, 2):
            trained = np.stack([(rng.random(300) < p).astype(float) for _ in range(3)])  # 3 fine-tuning seeds
            run_dir = tmp_path / f"{objective}{seed}"
            run_dir.mkdir()
            keys = {"eval/nsp": trained, "eval/nsp|random_init": random_init, "eval/nsp|examples": np.array("x")}
            np.savez(run_dir / OUTCOMES, **keys)
            m = margin(trained, random_init)
            rows.append(
                {
                    "status": "finished",
                    "objective": objective,
                    "swept": {"seed": seed},
                    "run_dir": str(run_dir),
                    "eval": {
                        "eval/nsp/accuracy": float(trained.mean()),
                        "eval/nsp/random_init_accuracy": float(random_init.mean()),
                        "eval/nsp/margin": m.value,
                        "eval/nsp/margin_low": m.low,
                        "eval/nsp/margin_high": m.high,
                    },
                }
            )
    text = verdict_text(rows)
    assert "nsp: shows pretraining" in text and "mlm leads clm by" in text


# ---------------------------------------------------------------------------------------- a fine-tune of a run
@pytest.mark.parametrize("objective", ["mlm", "clm", "span_corruption"])
def test_fine_tuning_a_pair_task_leaves_the_runs_model_and_rng_untouched(tmp_path, objective):
    cfg = config(
        tmp_path / "cache",
        f"objective={objective}",
        "~eval.tasks.probe",
        "+eval.tasks.nsp={source: builtin, task: next_sentence, protocol: finetune, max_train_examples: 64, "
        "max_test_examples: 40}",
        "eval.finetune.steps=4",
        "eval.finetune.seeds=2",
        "eval.finetune.max_length=48",
        "eval.probe.random_init_seeds=2",
    )
    run = build(RunSettings.of(cfg))
    model, module = run.model, run.module
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    metrics = module.evaluation(model)
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert 0 <= metrics["eval/nsp/accuracy"] <= 1 and metrics["eval/nsp/majority_accuracy"] >= 0.5
    outcomes = module.evaluation.outcomes()
    assert outcomes["eval/nsp"].shape == (2, 40) and outcomes["eval/nsp|random_init"].shape == (2, 40)
    assert metrics["eval/nsp/accuracy"] == pytest.approx(outcomes["eval/nsp"].mean())
    m = margin(outcomes["eval/nsp"], outcomes["eval/nsp|random_init"])
    assert (metrics["eval/nsp/margin_low"], metrics["eval/nsp/margin_high"]) == (m.low, m.high)
    again = module.evaluation(model)  # the same seeds: the same fine-tunes
    assert again["eval/nsp/accuracy"] == metrics["eval/nsp/accuracy"]
