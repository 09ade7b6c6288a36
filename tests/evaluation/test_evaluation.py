"""The comparable evaluation: the fixed exam, the probe's maths, the built-in task, user tasks, bad input."""

import json
import math
import signal

import pytest
import torch
import torch.nn.functional as F
from helpers import write_records
from hydra import compose, initialize_config_dir

from selfsup.data.builtin import builtin_documents
from selfsup.evaluation import EvalError, Evaluation, Finetune, Task
from selfsup.evaluation.builtin import builtin_examples, probe_sentences, sentences
from selfsup.evaluation.probe import features, fit_linear, linear_probe, scores
from selfsup.run.build import build, prepare
from selfsup.run.cli import CONF_DIR
from selfsup.run.schema import register
from selfsup.run.settings import RunSettings

TINY = ["debug=tiny", "eval.pairs=null"]


def config(cache_dir, *overrides):
    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        return compose("train", overrides=[*TINY, f"data.cache_dir={cache_dir}", *overrides])


# ---------------------------------------------------------------------------------------- fixed exam
@pytest.mark.parametrize(
    "family,runs",
    [
        (
            "mlm",
            [
                ["objective.mask_rate=0.1"],
                ["objective.mask_rate=0.4", "seed=3", "data.batch_size=4"],
                ["objective.mask_token_prob=0.5", "objective.random_token_prob=0.5"],
            ],
        ),
        (
            "span_corruption",
            [["objective.mean_span_length=2"], ["objective.mean_span_length=8", "objective.mask_rate=0.5", "seed=1"]],
        ),
    ],
)
def test_fixed_exam_masks_are_the_same_whatever_the_run_trained_with(cache_dir, family, runs):
    exams = []
    for overrides in runs:
        cfg = config(cache_dir, f"objective={family}", "eval.tasks=null", *overrides)
        run = build(RunSettings.of(cfg))
        module = run.module
        assert module.evaluation.tasks == {}  # eval.tasks=null: no probe
        exam = module.evaluation.exam
        exams.append({member: list(exam.batches(member=member)) for member in exam.members})
    first = exams[0]
    assert len(first) == {"mlm": 4, "span_corruption": 7}[family]  # the whole panel, each member's own masks
    for member, batches in first.items():
        assert len(batches) >= 1 and batches[0].n_scored > 0
        for other in exams[1:]:
            assert len(other[member]) == len(batches)
            for a, b in zip(batches, other[member]):
                assert torch.equal(a.encoder_inputs, b.encoder_inputs) and torch.equal(a.targets, b.targets)
                assert (a.decoder_inputs is None) == (b.decoder_inputs is None)
                assert a.decoder_inputs is None or torch.equal(a.decoder_inputs, b.decoder_inputs)


def test_fixed_exam_is_mlm_at_each_panel_rate_and_its_loss_is_the_mean_of_token_weighted_losses(cache_dir):
    cfg = config(cache_dir, "objective.mask_rate=0.4", "eval.tasks=null")
    run = build(RunSettings.of(cfg))
    model, module = run.model, run.module
    exam = module.evaluation.exam
    assert (
        exam.objective.name,
        exam.objective.mask_rate,
        exam.objective.mask_token_prob,
        exam.objective.random_token_prob,
    ) == ("mlm", 0.15, 0.8, 0.1)  # the canonical member (the predictions')
    assert list(exam.members) == ["rate_10", "rate_15", "rate_25", "rate_40"]
    model.eval()
    losses = []
    for member, (objective, windows) in exam.members.items():
        rate = float(member.removeprefix("rate_")) / 100
        assert (objective.name, objective.mask_rate, objective.mask_token_prob, objective.random_token_prob) == (
            "mlm",
            rate,
            0.8,
            0.1,
        )
        batches = list(exam.batches(member=member))
        scored = sum(int(b.n_scored) for b in batches)
        ordinary = int((~objective.is_special(windows)).sum())
        assert abs(scored / ordinary - rate) < 4 * math.sqrt(rate * (1 - rate) / ordinary)  # +-4 sigma
        with torch.no_grad():  # sum of -log p over every scored position of every batch / their number
            nll = sum(
                F.cross_entropy(
                    model.head(model(encoder_inputs=b.encoder_inputs))[b.scored].float(),
                    b.targets[b.scored],
                    reduction="sum",
                )
                for b in batches
            )
        losses.append(float(nll) / scored)
    assert exam.loss(model) == pytest.approx(sum(losses) / len(losses), rel=1e-5)  # each rate counts equally


@pytest.mark.parametrize("family", ["mlm", "span_corruption", "clm"])
def test_fixed_exam_split_by_kind_of_target_sums_back_to_its_loss(cache_dir, family):
    """eval/fixed/<kind>/...: pooled over the panel's members with each member's scored targets weighing
    1 / (members x their number), as in the loss: the scored kinds' fractions sum to 1 and each one's loss
    weighted by its fraction sums to the exam's loss (the mean of the members'); each kind is what it says (MLM:
    what the encoder read; span corruption: first and later tokens of spans, scored, and the sentinels and eos,
    reported as the mean of the members' loss on them but out of the loss), beside the training split's unigram
    on the same targets, weighed alike."""
    from selfsup.evaluation.fixed import KINDS, UNSCORED
    from selfsup.evaluation.scoring import unigram_logprobs

    cfg = config(cache_dir, f"objective={family}", "eval.tasks=null", "eval.fixed.max_tokens=8192")
    run = build(RunSettings.of(cfg))
    model, exam = run.model, run.module.evaluation.exam
    model.eval()
    found = exam.metrics(model)
    kinds = KINDS[exam.architecture]
    graded = [k for k in kinds if k not in UNSCORED]
    assert graded == (["first", "later"] if family == "span_corruption" else list(kinds))
    if len(kinds) > 1:
        assert sum(found[f"eval/fixed/{k}/fraction"] for k in graded) == pytest.approx(1.0, abs=1e-12)
        total = sum(found[f"eval/fixed/{k}/fraction"] * found[f"eval/fixed/{k}/loss"] for k in graded)
        assert total == pytest.approx(found["eval/fixed/loss"], rel=1e-9)
    assert found["eval/fixed/loss"] == pytest.approx(exam.loss(model), rel=1e-12)
    vocab = exam.objective.vocab
    unigram = torch.as_tensor(unigram_logprobs(run.data.corpus.train_tokens, vocab.size))
    losses, shares, unigrams, apart = [], {k: [] for k in kinds}, {k: [] for k in kinds}, []
    for member, (objective, _) in exam.members.items():
        batches = list(exam.batches(member=member))
        with torch.no_grad():
            nll = torch.cat(
                [
                    F.cross_entropy(
                        model.head(
                            model(
                                encoder_inputs=b.encoder_inputs,
                                decoder_inputs=b.decoder_inputs,
                                encoder_mask=b.encoder_mask,
                            )
                        )[b.scored].float(),
                        b.targets[b.scored],
                        reduction="none",
                    )
                    for b in batches
                ]
            )
        codes = torch.cat([exam.kinds(b) for b in batches])
        targets = torch.cat([b.targets[b.scored] for b in batches])
        out = torch.tensor([kinds[int(c)] in UNSCORED for c in codes], dtype=torch.bool)
        scored = int((~out).sum())
        losses.append(float(nll[~out].sum()) / scored)
        if out.any():
            apart.append(float(nll[out].mean()))
        for code, kind in enumerate(kinds):
            shares[kind].append(int((codes == code).sum()) / scored)
            unigrams[kind].append(float(-unigram[targets[codes == code]].sum()) / scored)
        if family == "mlm":  # 80% <mask>, 10% random, 10% unchanged (a random token may be the same: unchanged)
            for kind, p in (("masked", 0.8), ("random", 0.1), ("unchanged", 0.1)):
                share = shares[kind][-1]
                assert abs(share - p) < 4 * math.sqrt(p * (1 - p) / scored) + 1 / vocab.size, member
            read = torch.cat([b.encoder_inputs[b.scored] for b in batches])
            assert bool((read[codes == 0] == vocab.mask_id).all()) and bool(
                (read[codes == 2] == targets[codes == 2]).all()
            )
            assert not bool((read[codes == 1] == targets[codes == 1]).any())
        if family == "span_corruption":  # every row: spans sentinels and one eos; one first token per span
            text = objective.targets_length - objective.spans - 1  # a row's scored targets: the spans' text
            assert shares["sentinel"][-1] == pytest.approx((objective.spans + 1) / text, abs=1e-12)
            assert shares["first"][-1] == pytest.approx(objective.spans / text, abs=1e-12)
            after = torch.cat([torch.roll(b.targets, 1, dims=1)[b.scored] for b in batches])
            assert bool(
                ((after[codes == 0] >= vocab.sentinel_start) & (after[codes == 0] < vocab.first_ordinary)).all()
            )
    assert found["eval/fixed/loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-5)  # the dense head's loss
    for kind in kinds:  # the members' shares, each member counting equally
        key = f"eval/fixed/{kind}/unigram_loss" if len(kinds) > 1 else "eval/fixed/unigram_loss"
        if kind == "sentinel":  # out of the loss: no share of it; never in the text: no unigram
            assert key not in found and f"eval/fixed/{kind}/fraction" not in found
            assert found[f"eval/fixed/{kind}/loss"] == pytest.approx(sum(apart) / len(apart), rel=1e-5)
            continue
        if len(kinds) > 1:
            assert found[f"eval/fixed/{kind}/fraction"] == pytest.approx(sum(shares[kind]) / len(losses), abs=1e-12)
        assert found[key] == pytest.approx(sum(unigrams[kind]) / sum(shares[kind]), rel=1e-9)


def test_decoder_exam_is_next_token_loss(cache_dir):
    cfg = config(cache_dir, "objective=prefix_lm", "eval.tasks=null")
    run = build(RunSettings.of(cfg))
    model, module = run.model, run.module
    exam = module.evaluation.exam
    assert exam.objective.name == "clm" and exam.architecture == "decoder" and list(exam.members) == ["clm"]
    model.eval()
    assert set(exam.metrics(model)) == {"eval/fixed/loss", "eval/fixed/perplexity", "eval/fixed/unigram_loss"}


# ---------------------------------------------------------------------------------------- probe maths
def test_scores_are_accuracy_and_macro_f1():
    s = scores(torch.tensor([0, 0, 1, 1]), torch.tensor([0, 1, 1, 1]), 2)
    assert s["accuracy"] == pytest.approx(0.75)
    # class 0: precision 1/2, recall 1 -> F1 2/3; class 1: precision 1, recall 2/3 -> F1 4/5
    assert s["macro_f1"] == pytest.approx((2 / 3 + 4 / 5) / 2)


def test_linear_probe_learns_a_linear_rule_and_only_from_training_examples():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(16, generator=g)
    x = torch.randn(600, 16, generator=g)
    y = (x @ w > 0).long()
    predicted = linear_probe(x[:400], y[:400], x[400:], 2)
    assert (predicted == y[400:]).float().mean() > 0.95
    noise = torch.randint(0, 2, (400,), generator=g)  # labels unrelated to the features: chance on new examples
    acc = float((linear_probe(x[:400], noise, x[400:], 2) == y[400:]).float().mean())
    assert abs(acc - 0.5) < 4 * math.sqrt(0.25 / 200)


def test_a_warm_started_fit_reaches_the_same_minimum_as_one_from_zeros():
    """The L2 grid is fitted from the strongest penalty down, each fit started from the last: the objective is
    strictly convex, so a start changes the iterations, not the minimum."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(500, 12, generator=g), torch.randint(0, 3, (500,), generator=g)

    def objective(fit, l2):
        weight, bias = fit
        return float(F.cross_entropy(x.double() @ weight.T + bias, y) + l2 * weight.pow(2).sum())

    for l2 in (1e-2, 1e-3):
        cold = fit_linear(x, y, 3, l2)
        warm = fit_linear(x, y, 3, l2, start=fit_linear(x, y, 3, 10 * l2))
        assert objective(warm, l2) == pytest.approx(objective(cold, l2), abs=1e-7)
        torch.testing.assert_close(warm[0], cold[0], atol=1e-3, rtol=0)


def test_features_do_not_depend_on_padding_or_batching():
    from selfsup.models import build_model

    torch.manual_seed(0)
    for arch in ("encoder", "decoder", "encoder_decoder"):
        model = build_model(arch, 300, 16, d_model=16, n_layers=1, n_heads=2)
        ids = torch.randint(10, 300, (5, 16))
        mask = torch.arange(16)[None] < torch.tensor([3, 16, 7, 1, 9])[:, None]
        ids = ids.masked_fill(~mask, 0)
        together = features(model, ids, mask, batch_tokens=80)
        alone = torch.cat(
            [
                features(model, ids[i : i + 1, : int(mask[i].sum())], mask[i : i + 1, : int(mask[i].sum())])
                for i in range(5)
            ]
        )
        assert torch.allclose(together, alone, atol=1e-5), arch


# ---------------------------------------------------------------------------------------- the built-in task
def test_builtin_task_is_held_out_from_pretraining_and_balanced():
    found = probe_sentences()
    assert len(found) > 3000
    pretraining = {s for doc in builtin_documents() for s in sentences(doc)}
    assert not pretraining & set(found)
    text = "\n".join(builtin_documents())
    assert sum(s in text for s in found[:300]) <= 3  # not even inside a longer pretraining sentence (a few short ones)
    examples = builtin_examples("replaced_word", 4)
    assert examples == builtin_examples("replaced_word", 4)  # deterministic
    originals, changed = examples[0::2], examples[1::2]
    assert all(y == 0 for _, y in originals) and all(y == 1 for _, y in changed)
    for (a, _), (b, _) in zip(originals, changed):
        wa, wb = a.split(), b.split()
        assert len(wa) == len(wb) and wa[0] == wb[0] and 1 <= sum(x != y for x, y in zip(wa, wb)) <= 4
    train, test = Task(name="probe").load()
    assert len(train) % 2 == 0 and set(train.texts[0::2]).isdisjoint(test.texts)  # a sentence's pair: one split
    assert sorted(set(train.labels)) == [0, 1] and abs(sum(test.labels) / len(test) - 0.5) < 0.01


# ---------------------------------------------------------------------------------------- user tasks
def write_examples(path, rows, fmt):
    write_records(path, rows, fmt)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_user_task_from_files(tmp_path, fmt):
    rows = [
        {"sentence": f"example number {i} is {'good' if i % 3 else 'bad'}", "label": "pos" if i % 3 else "neg"}
        for i in range(200)
    ]
    write_examples(tmp_path / f"t.{fmt}", rows, fmt)
    task = Task(source="text_files", paths=[str(tmp_path / f"t.{fmt}")], text_field="sentence", name="mine")
    train, test = task.load()
    assert task.classes == ["neg", "pos"] and len(train) + len(test) == 200
    assert 20 <= len(test) <= 60 and set(train.texts).isdisjoint(test.texts)  # test_fraction 0.2 by text hash
    assert all(task.classes[y] == ("pos" if "good" in t else "neg") for t, y in zip(train.texts, train.labels))


def test_user_task_from_a_local_hf_dataset(tmp_path):
    pytest.importorskip("datasets")
    for split in ("train", "validation"):
        write_examples(
            tmp_path / f"{split}.jsonl", [{"sentence": f"{split} text {i}", "label": i % 2} for i in range(20)], "jsonl"
        )
    task = Task(
        source="hf_dataset",
        hf_name="json",
        text_field="sentence",
        name="sst2",
        data_files={"train": str(tmp_path / "train.jsonl"), "validation": str(tmp_path / "validation.jsonl")},
    )
    train, test = task.load()
    assert (len(train), len(test), task.classes) == (20, 20, ["0", "1"])
    assert test.texts[0] == "validation text 0"


@pytest.mark.parametrize(
    "task,message",
    [
        ({"source": "builtin", "task": "nope"}, "eval.tasks.t.task=nope is not a built-in task"),
        ({"source": "nowhere"}, "eval.tasks.t.source=nowhere is unknown"),
        ({"source": "text_files", "paths": ["{d}/t.jsonl"], "text_field": "body"}, "no field 'body'"),
        ({"source": "text_files", "paths": ["{d}/t.jsonl"], "label_field": "y"}, "no field 'y'"),
        ({"source": "text_files", "paths": ["{d}/one.jsonl"]}, "needs at least 2 classes"),
        (
            {"source": "text_files", "paths": ["{d}/few.jsonl"], "test_paths": ["{d}/few.jsonl"]},
            "3 training examples for 4 classes",
        ),
        ({"source": "text_files", "paths": ["{d}/missing.jsonl"]}, "does not exist"),
        ({"sourc": "builtin"}, "eval.tasks.t.sourc is not a task setting"),
    ],
)
def test_bad_tasks_are_refused_in_one_line_before_training(cache_dir, tmp_path, task, message):
    write_examples(tmp_path / "t.jsonl", [{"text": f"text {i}", "label": i % 2} for i in range(30)], "jsonl")
    write_examples(tmp_path / "one.jsonl", [{"text": f"text {i}", "label": 1} for i in range(30)], "jsonl")
    write_examples(
        tmp_path / "few.jsonl",
        [{"text": f"text {i}", "label": i} for i in range(3)] + [{"text": "text 3", "label": 3}],
        "jsonl",
    )
    task = {k: ([p.format(d=tmp_path) for p in v] if isinstance(v, list) else v) for k, v in task.items()}
    if "few" in str(task.get("paths")):
        task["max_train_examples"] = 3
    settings = ", ".join(f"{k}: {json.dumps(v)}" for k, v in task.items())
    cfg = config(cache_dir, "~eval.tasks.probe", f"+eval.tasks.t={{{settings}}}")
    with pytest.raises(EvalError, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        prepare(RunSettings.of(cfg))
    assert "\n" not in str(err.value)


def test_a_probe_task_that_holds_pretraining_documents_is_refused(cache_dir, tmp_path):
    docs = [{"text": f"document {i} has several words of text about topic {i % 5}", "label": i % 2} for i in range(400)]
    write_examples(tmp_path / "corpus.jsonl", docs, "jsonl")
    cfg = config(
        cache_dir,
        "data=text_files",
        f"data.paths=[{tmp_path / 'corpus.jsonl'}]",
        "data.batch_size=2",
        "data.seq_len=16",
        "~eval.tasks.probe",
        f"+eval.tasks.t={{source: text_files, paths: [{tmp_path / 'corpus.jsonl'}]}}",
    )
    with pytest.raises(EvalError, match="documents of the pretraining data"):
        prepare(RunSettings.of(cfg))


def test_evaluation_settings_are_checked():
    for probe, message in [
        ({"protocol": "knn"}, "eval.probe.protocol=knn is unknown"),
        ({"l2": -1.0}, "eval.probe.l2=-1.0"),
        ({"max_length": 0}, "eval.probe.max_length=0"),
    ]:
        with pytest.raises(EvalError, match=message):
            Evaluation(probe=probe).check()
    for settings, message in [
        ({"lr": float("nan")}, "eval.finetune.lr=nan must be a finite number > 0"),
        ({"steps": 0}, "eval.finetune.steps=0 must be at least 1"),
        ({"seeds": 1.5}, "eval.finetune.seeds=1.5 must be at least 1"),
        ({"warmup": 1.0}, r"eval.finetune.warmup=1.0 must be a fraction of the steps in \[0, 1\)"),
        ({"weight_decay": -0.1}, "eval.finetune.weight_decay=-0.1 must be a finite number >= 0"),
        ({"pooling": "cls"}, "eval.finetune.pooling=cls is unknown: use one of auto, hf, mean"),
        ({"max_length": 4}, "eval.finetune.max_length=4 leaves no room for a sentence pair"),
        ({"epochs": 0}, "eval.finetune.epochs=0 must be a finite number > 0"),
        ({"min_steps": 400}, "eval.finetune.min_steps=400 is above eval.finetune.max_steps=100"),
    ]:
        with pytest.raises(EvalError, match=message):
            Evaluation(finetune=Finetune(**settings)).check()
    with pytest.raises(EvalError, match="eval.tasks.t.protocol=knn is unknown: use one of linear, finetune"):
        Evaluation(tasks={"t": Task(protocol="knn")}).check()


def test_a_fine_tunes_steps_follow_the_tasks_size_unless_set():
    """steps null: epochs passes over the training examples in batches, rounded up, within [min_steps, max_steps];
    a count set is kept whatever the task's size."""
    rule = Finetune(epochs=5, batch_size=32, min_steps=50, max_steps=300)
    assert [rule.for_examples(n).steps for n in (10, 320, 1038, 1900, 3000)] == [50, 50, 163, 297, 300]
    assert Finetune(steps=7).for_examples(3000).steps == 7
    assert rule.for_examples(1038).settings()[0] == 163  # what a cached baseline's key holds


def test_max_flops_stops_a_run_at_equal_compute(cache_dir, tmp_path):
    import lightning as L

    cfg = config(cache_dir, "trainer.max_steps=5", "eval=none")
    run = build(RunSettings.of(cfg))
    dm, module = run.data, run.module
    trainer = L.Trainer(
        max_steps=5,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(module, datamodule=dm)
    per_step = module.flops_seen / trainer.global_step
    assert per_step == module.flops_per_batch > 0  # the first step's measured count, every step
    cfg = config(
        cache_dir,
        "trainer.max_steps=50",
        f"trainer.max_flops={3.5 * per_step}",
        "eval.fixed=null",
        "eval.tasks=null",
        "optim.warmup_steps=1",
        "optim.lr=1e-3",
    )
    run = build(RunSettings.of(cfg))
    dm, module = run.data, run.module
    trainer = L.Trainer(
        max_steps=50,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(module, datamodule=dm)
    assert trainer.global_step == 4 and module.flops_seen == pytest.approx(4 * per_step)
    # its cosine ends where the budget does (step 4 of 50): the run's whole schedule, as at equal steps
    assert module.optim.lr_decay_steps == 4
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(1e-3 * module.optim.min_lr_ratio)


def test_the_finetune_protocol_trains_a_copy(cache_dir):
    cfg = config(
        cache_dir,
        "eval.probe.protocol=finetune",
        "eval.finetune.steps=5",
        "eval.tasks.probe.max_train_examples=64",
        "eval.tasks.probe.max_test_examples=32",
    )
    run = build(RunSettings.of(cfg))
    model, module = run.model, run.module
    before = {k: v.clone() for k, v in model.state_dict().items()}
    metrics = module.evaluation(model)
    assert 0 <= metrics["eval/probe/accuracy"] <= 1 and "eval/probe/random_init_accuracy" in metrics
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the run's model is untouched


def test_an_exam_without_windows_shows_no_examples():
    import numpy as np

    from selfsup.data.vocab import Vocab
    from selfsup.evaluation.fixed import FixedExam
    from selfsup.models import build_model

    model = build_model("decoder", 300, 64, d_model=16, n_layers=1, n_heads=2)
    exam = FixedExam("decoder", Vocab(300, n_sentinels=8), 32, np.arange(200) % 300, max_tokens=32)
    assert exam.examples(model, None) == []


def test_the_fixed_exam_reads_at_most_max_tokens_of_the_validation_split():
    import numpy as np

    from selfsup.data.vocab import Vocab
    from selfsup.evaluation.fixed import FixedExam

    val = (np.arange(100_000) % 280 + 20).astype(np.uint16)
    exam = FixedExam("decoder", Vocab(300, n_sentinels=8), 32, val, max_tokens=1000)
    assert tuple(exam.windows.shape) == (1000 // 33, 33)  # a decoder's window: seq_len + 1
    assert exam.windows.flatten().tolist() == val[: 30 * 33].tolist()  # the split's start
    assert len(FixedExam("decoder", Vocab(300, n_sentinels=8), 32, val, max_tokens=None).windows) == 100_000 // 33
    panel = FixedExam("encoder", Vocab(300, n_sentinels=8), 32, val, max_tokens=1000)  # 4 members share 1000 tokens
    assert {m: tuple(w.shape) for m, (_, w) in panel.members.items()} == {m: (250 // 32, 32) for m in panel.members}
    assert all(w.flatten().tolist() == val[: 7 * 32].tolist() for _, w in panel.members.values())


def test_the_probe_random_init_baselines_are_computed_once_per_shape(cache_dir):
    """Two seeds of their own (the same for every run of a shape): a run of another seed reads them, another
    shape makes its own; the margin over them comes with its paired bootstrap interval."""
    from pathlib import Path

    from selfsup.evaluation.stats import margin

    small = ["eval.fixed=null", "eval.tasks.probe.max_train_examples=200", "eval.tasks.probe.max_test_examples=100"]
    folder = Path(cache_dir) / "probe-random-init"

    def evaluate(*overrides):
        run = build(RunSettings.of(config(cache_dir, *small, *overrides)))
        return run.module.evaluation, run.module.evaluation(run.model)

    before = set(folder.glob("*.json")) if folder.is_dir() else set()
    evaluation, first = evaluate()
    entries = set(folder.glob("*.json")) - before
    assert len(entries) == 2  # one per seed (eval.probe.random_init_seeds)
    stamps = {e: e.stat().st_mtime_ns for e in entries}
    baselines = {k: v for k, v in first.items() if "random_init" in k or "majority" in k}
    _, again = evaluate("seed=1")  # another run seed: the same untrained models, read back
    assert {k: again[k] for k in baselines} == baselines and {e: e.stat().st_mtime_ns for e in entries} == stamps
    assert evaluation.random_init["probe"].shape == (2, 100)
    m = margin(evaluation.last["probe"], evaluation.random_init["probe"])
    assert (first["eval/probe/margin"], first["eval/probe/margin_low"], first["eval/probe/margin_high"]) == (
        m.value,
        m.low,
        m.high,
    )
    assert first["eval/probe/margin"] == pytest.approx(
        first["eval/probe/accuracy"] - first["eval/probe/random_init_accuracy"]
    )
    assert first["eval/probe/margin_examples"] == 100  # what the verdict's MIN_EXAMPLES reads
    p = first["eval/probe/accuracy"]  # the test set's binomial error, 100 test examples
    assert first["eval/probe/accuracy_se"] == pytest.approx((p * (1 - p) / 99) ** 0.5)
    evaluate("architecture.d_model=16")  # another shape: its own entries
    assert len(set(folder.glob("*.json")) - before) == 4
    sorted(entries)[0].write_text("{not json")  # a damaged entry is computed again
    assert {k: evaluate()[1][k] for k in baselines} == baselines


def test_a_stop_signal_ends_the_evaluation_at_a_boundary_and_keeps_nothing_of_it(cache_dir):
    """SIGTERM noted during an evaluation (selfsup.reliability.stop): it ends before its next part, task or
    random-init seed; the outcomes of the last complete evaluation stay those of that evaluation."""
    from selfsup.reliability import stop

    small = ["eval.tasks.probe.max_train_examples=100", "eval.tasks.probe.max_test_examples=50"]
    run = build(RunSettings.of(config(cache_dir, *small, "architecture.d_model=24")))
    evaluation = run.module.evaluation
    try:
        stop.note(signal.SIGTERM)  # before the first part: not even the random-init baselines are computed
        assert evaluation(run.model) is None and not evaluation.baselines and not evaluation.random_init
        stop.clear()
        complete = evaluation(run.model)
        assert 0 <= complete["eval/probe/accuracy"] <= 1
        kept = dict(evaluation.last)
        stop.note(signal.SIGTERM)
        assert evaluation(run.model) is None
        assert evaluation.last.keys() == kept.keys() and all(evaluation.last[k] is kept[k] for k in kept)
    finally:
        stop.clear()
    assert evaluation(run.model) == complete  # the same model scored again, once no stop is asked for


def test_the_evaluation_says_each_part_as_it_goes_with_the_time_the_last_one_took(cache_dir):
    """report_progress: the plan, then a line as each part starts (the fixed exam, the pairs and their random-init
    seeds, each task and its seeds), naming the part before with its seconds, and a closing line with the whole
    time."""
    from selfsup.evaluation.baselines import report_progress

    small = ["eval.tasks.probe.max_train_examples=100", "eval.tasks.probe.max_test_examples=50"]
    run = build(RunSettings.of(config(cache_dir, *small, "architecture.d_model=24", "eval.probe.random_init_seeds=2")))
    said: list[str] = []
    report_progress(said.append)
    try:
        run.module.evaluation(run.model)
    finally:
        report_progress(None)
    assert said.pop(0).startswith("plan: the fixed exam (4 members, at most ")  # the plan first
    assert said[0] == "evaluating: the fixed exam"
    assert said[1].startswith("evaluating: the held-out text  (the fixed exam: ")
    assert said[2].startswith("evaluating: the tasks' random-init seed 1 of 2  (the held-out text: ")
    assert said[3].startswith("evaluating: the tasks' random-init seed 2 of 2  (the tasks' random-init seed 1 of 2: ")
    assert said[4].startswith("evaluating: task probe's TF-IDF + logistic regression  (the tasks' random-init seed 2")
    assert said[5].startswith("evaluating: task probe  (task probe's TF-IDF + logistic regression: ")
    assert said[-1].startswith("evaluated in ") and said[-1].endswith(" s)") and len(said) == 7
    seconds = [float(line.rsplit(": ", 1)[1].removesuffix(" s)")) for line in said[1:]]
    total = float(said[-1].split()[2])
    # each part and the total are printed to 0.1 s: their rounding adds up to 0.05 s each
    assert all(s >= 0 for s in seconds) and sum(seconds) <= total + 0.05 * (len(seconds) + 1) + 1e-9
    assert all(len(line) <= 100 for line in said)


def test_a_part_under_way_is_said_again_with_the_time_left_of_the_plans_estimate(monkeypatch):
    """check_stop (between batches and fine-tuning steps): once HEARTBEAT seconds passed since the last line, the
    part under way again, its time, the evaluation's, and what is left of the estimate (none: no time left)."""
    from selfsup.evaluation import baselines

    said: list[str] = []
    baselines.report_progress(said.append)
    try:
        baselines.evaluation_started(estimate=600)
        baselines.boundary("task probe")
        baselines.check_stop()  # within HEARTBEAT of the last line: nothing said
        monkeypatch.setattr(baselines, "HEARTBEAT", 0.0)
        baselines.check_stop()
        baselines.evaluation_done(1.0)
        baselines.evaluation_started()
        baselines.boundary("the minimal pairs")
        baselines.check_stop()
    finally:
        baselines.report_progress(None)
    assert said[:2] == [
        "evaluating: task probe",
        "evaluating: task probe, 0:00 in it; 0:00 in all of about 10 min, about 10 min left",
    ]
    assert said[2].startswith("evaluated in 1.0 s  (task probe: ")
    assert said[4] == "evaluating: the minimal pairs, 0:00 in it; 0:00 in all" and len(said) == 5


def test_the_plan_says_each_part_and_which_baselines_the_cache_holds_or_an_earlier_run_will_write(tmp_path):
    """Evaluation.plan: the parts with their work and random-init seeds, an estimate from a warm-up; a second run of
    the shape planned after it counts the first's baselines as cached (pending), as does any plan once they are
    written; the next evaluation counts down from the plan and says it no more."""
    import re

    from selfsup.evaluation import baselines

    small = [
        "debug=tiny",  # its pairs kept (config() turns them off)
        f"data.cache_dir={tmp_path / 'cache'}",
        "eval.pairs.max_pairs=20",
        "eval.tasks.probe.max_train_examples=100",
        "eval.tasks.probe.max_test_examples=50",
    ]

    def planned(*overrides, pending=None):
        register()
        with initialize_config_dir(str(CONF_DIR), version_base=None):
            run = build(RunSettings.of(compose("train", overrides=[*small, *overrides])))
        return run, run.module.evaluation.plan(run.model, pending)

    pending: set = set()
    first, plan = planned(pending=pending)
    assert [s.name for s in plan.steps] == ["the fixed exam", "the minimal pairs", "the held-out text", "task probe"]
    assert all(s.seconds > 0 for s in plan.steps) and plan.baselines == (0, 5)  # 3 seeds of the pairs, 2 of the probe
    assert re.fullmatch(
        r"plan: the fixed exam \(\d members, at most [\d,]+ validation tokens \(eval.fixed.max_tokens=null for all\)\); "
        r"the minimal pairs \(\d+ pairs, 1 scorer, random-init 3 seeds, the built-in set's first [\d,]+ of each type "
        r"\(eval.pairs.max_pairs\) of at most \d+ words \(eval.pairs.max_words\)(, [\d,]+ left out: longer than the "
        r"model's positions \(raise data.seq_len\))?\); the held-out text \(\d+ pieces of its first [\d,]+ bytes "
        r"\(eval.heldout.max_bytes\)\); task probe \(linear: random-init 2 seeds, 100 training and 50 test "
        r"examples, 100 of [\d,]+ training examples \(eval.tasks.probe.max_train_examples=null for all\), 50 of "
        r"[\d,]+ test examples \(eval.tasks.probe.max_test_examples=null for all\)(, \d+ reach "
        r"eval.probe.max_length=\d+ tokens \(longer ones cut\))?\); about \d+ s \(a \d+ s warm-up\)",
        plan.line(),
    ), plan.line()
    assert planned("seed=1", pending=pending)[1].baselines == (5, 5)  # the first run will have written them
    assert planned("architecture.d_model=16", pending=pending)[1].baselines == (0, 5)  # another shape: its own
    said: list[str] = []
    baselines.report_progress(said.append)
    try:
        first.module.evaluation(first.model)
    finally:
        baselines.report_progress(None)
    assert not any(line.startswith("plan: ") for line in said)  # said already
    assert first.module.evaluation.estimated == plan.seconds and first.module.evaluation.planned is None
    again = planned()[1]
    assert again.baselines == (5, 5) and "random-init 3 seeds: 3 cached" in again.line()


def test_per_class_results_from_confusion_matrices_summed_over_seeds():
    """Three classes, two fine-tuning seeds: each class's accuracy (recall) and F1 from the summed matrix, as
    worked by hand; a class without test examples has no accuracy."""
    from selfsup.evaluation.probe import confusion, per_class

    labels = torch.tensor([0, 0, 0, 1, 1, 2])
    seed0 = torch.tensor([0, 0, 1, 1, 2, 2])  # class 0: 2 of 3 right; 1: 1 of 2; 2: 1 of 1
    seed1 = torch.tensor([0, 1, 1, 1, 1, 0])  # class 0: 1 of 3; 1: 2 of 2; 2: 0 of 1
    found = per_class([confusion(p, labels, 3) for p in (seed0, seed1)], ["a", "b", "c"])
    assert found["confusion"] == [[3, 3, 0], [0, 3, 1], [1, 0, 1]]  # rows true, columns predicted; 2 seeds summed
    assert found["test_examples"] == [3, 2, 1] and found["fine_tuning_seeds"] == 2
    assert found["accuracy"] == [0.5, 0.75, 0.5]  # 3/6, 3/4, 1/2
    # F1 = 2PR/(P+R): a: P 3/4, R 1/2 -> 0.6; b: P 3/6, R 3/4 -> 0.6; c: P 1/2, R 1/2 -> 0.5
    assert found["f1"] == [0.6, 0.6, 0.5]
    empty = per_class([confusion(torch.tensor([0, 1]), torch.tensor([0, 0]), 3)], ["a", "b", "c"])
    assert empty["accuracy"] == [0.5, None, None] and empty["f1"] == [pytest.approx(0.6667, abs=1e-4), 0.0, 0.0]
