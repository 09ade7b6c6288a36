"""selfsup.training.tune.NoiseAwarePruner on in-memory Optuna studies with hand-made intermediate values (median and
hyperband: a trial worse than the reference by less than its SE is kept, by more pruned); the sweeper's
seed record (mean, SE, random-init margins) from summaries; the report's study lines (best ± SE, margins,
"not distinguishable", importances only from 10 complete trials) and each study once."""

import json
import math

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from selfsup.training.tune import NoiseAwarePruner


def median_study(values=(0.80, 0.84, 0.90)):
    study = optuna.create_study(direction="maximize")
    for value in values:
        trial = study.ask()
        trial.report(value, 50)
        study.tell(trial, value)
    return study


@pytest.mark.parametrize(
    "value,se,pruned",
    [(0.80, 0.05, False), (0.80, 0.03, True), (0.83, 0.001, True), (0.86, 0.0, False), (0.80, None, False)],
)
def test_median_prunes_only_beyond_the_se(value, se, pruned):
    study = median_study()  # median at step 50: 0.84
    pruner = NoiseAwarePruner("median", startup=3)
    trial = study.ask()
    trial.report(value, 50)
    pruner.se = se
    assert pruner.prune(study, study.trials[-1]) is pruned
    if value < 0.84:
        assert pruner.last["reference"] == pytest.approx(0.84) and pruner.last["value"] == pytest.approx(value)
        assert pruner.last["worse_by"] == pytest.approx(0.84 - value) and pruner.last["se"] == se
    else:
        assert pruner.last is None  # MedianPruner itself keeps it


def test_median_minimize_and_startup():
    study = optuna.create_study(direction="minimize")
    for value in (1.0, 2.0, 3.0):
        trial = study.ask()
        trial.report(value, 10)
        study.tell(trial, value)
    trial = study.ask()
    trial.report(2.5, 10)
    pruner = NoiseAwarePruner("median", startup=3)
    pruner.se = 0.4
    assert pruner.prune(study, study.trials[-1]) is True and pruner.last["worse_by"] == pytest.approx(0.5)
    pruner.se = 0.6
    assert pruner.prune(study, study.trials[-1]) is False
    assert NoiseAwarePruner("median", startup=4).prune(study, study.trials[-1]) is False  # 3 complete < 4


def hyperband_study(values):
    """Trials through Optuna's own HyperbandPruner (min_resource 50, max 150, factor 3: 2 brackets; bracket 0's
    first rung at step 50, bracket 1's at 150): each reports at 50, 100, 150; a trial the pruner stops is
    pruned, as in a sweep. Then one more trial at 0.80 (the one judged), reported at 50, 100, 150. A fixed
    study name: the same brackets each time (Hyperband hashes name and number)."""
    pruner = NoiseAwarePruner("hyperband", min_resource=50, max_resource=150, reduction_factor=3)
    pruner.se = 0.0
    study = optuna.create_study(study_name="hb", direction="maximize", pruner=pruner)
    for value in values:
        trial = study.ask()
        for step in (50, 100, 150):
            trial.report(value, step)
            if trial.should_prune():
                study.tell(trial, state=TrialState.PRUNED)
                break
        else:
            study.tell(trial, value)
    trial = study.ask()
    for step in (50, 100, 150):
        trial.report(0.80, step)
    return study, pruner


VALUES = [0.90, 0.85, 0.80, 0.86, 0.88, 0.84, 0.87, 0.83, 0.89]


@pytest.mark.parametrize("factor,pruned", [(1.1, False), (0.9, True)])
def test_hyperband_prunes_only_beyond_the_se_at_the_promotion_cut(factor, pruned):
    from selfsup.common.upstream import hyperband_bracket_trials

    study, pruner = hyperband_study(VALUES)
    frozen = study.trials[-1]
    assert pruner.prune(study, frozen) is True  # SE 0: what successive halving says
    judged = dict(pruner.last)
    bracket = hyperband_bracket_trials(pruner.inner, study, frozen)
    attrs = study.trials[-1].system_attrs
    rung = max(int(k.rsplit("_", 1)[1]) for k in attrs if k.startswith("completed_rung_"))
    key = f"completed_rung_{rung}"
    competing = sorted(
        [t.system_attrs[key] for t in bracket if t.number != frozen.number and key in t.system_attrs] + [0.80]
    )
    cut = competing[-max(len(competing) // 3, 1)]  # the worst value of the top third, own value included
    assert judged["reference"] == pytest.approx(cut) and judged["worse_by"] == pytest.approx(cut - 0.80) and cut > 0.80
    study, pruner = hyperband_study(VALUES)  # the same study again, judged with an SE around the gap
    pruner.se = (cut - 0.80) * factor
    assert pruner.prune(study, study.trials[-1]) is pruned
    assert pruner.last["reference"] == pytest.approx(cut)


def test_none_prunes_nothing():
    study = median_study()
    trial = study.ask()
    trial.report(0.0, 50)
    pruner = NoiseAwarePruner("none")
    pruner.se = 0.0
    assert pruner.prune(study, study.trials[-1]) is False


# ---------------------------------------------------------------------------- seeds
def test_seed_record_mean_se_and_margins():
    from hydra_plugins.selfsup_sweeper.study import seed_record

    summaries = [
        {
            "eval": {
                "eval/probe/accuracy": 0.52,
                "eval/probe/accuracy_se": 0.011,
                "eval/probe/random_init_accuracy": 0.494,
                "eval/probe/random_init_accuracy_sd": 0.006,
                "eval/probe/margin": 0.026,
                "eval/probe/margin_low": 0.004,
                "eval/probe/margin_high": 0.047,
            }
        },
        {
            "eval": {
                "eval/probe/accuracy": 0.56,
                "eval/probe/accuracy_se": 0.011,
                "eval/probe/random_init_accuracy": 0.494,
                "eval/probe/random_init_accuracy_sd": 0.008,
                "eval/probe/margin": 0.066,
            }
        },
    ]
    two = seed_record("eval/probe/accuracy", [0.52, 0.56], summaries)
    assert two["value_se"] == pytest.approx(0.02)  # sd sqrt(0.0008) / sqrt(2)
    assert two["random_init"] == pytest.approx(0.494) and two["random_init_sd"] == pytest.approx(math.sqrt(0.00005))
    assert two["margin"] == pytest.approx(0.046) and two["margin_se"] == pytest.approx(0.02)
    one = seed_record("eval/probe/accuracy", [0.52], summaries[:1])
    assert one["value_se"] == 0.011 and (one["margin"], one["margin_low"], one["margin_high"]) == (0.026, 0.004, 0.047)
    assert seed_record("val/loss", [5.0], [{"eval": {}}]) == {"seeds": 1, "values": [5.0], "value_se": None}


# ---------------------------------------------------------------------------- the report's lines
def made_study(values, se=0.011, **attrs):
    study = optuna.create_study(direction="maximize")
    dist = optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    for i, value in enumerate(values):
        trial = study.ask({"optim.lr": dist})
        trial.set_user_attr("run_dir", f"/sweep/{trial.number}")
        trial.set_user_attr("value_se", se)
        for key, v in attrs.items():
            trial.set_user_attr(key, v)
        study.tell(trial, value)
    return study


def test_best_lines_with_margins_and_runner_up():
    from selfsup.report.studies import study_best_lines

    study = made_study(
        [0.4990, 0.5036, 0.4800],
        random_init=0.494,
        random_init_sd=0.006,
        margin=0.0096,
        margin_low=-0.012,
        margin_high=0.031,
    )
    lines = study_best_lines(study)
    assert lines[0].startswith("Best: trial 1, value 0.5036 ± 0.0110 (SE over the test examples), optim.lr=")
    assert lines[0].endswith("(run dir /sweep/1).")
    assert lines[1] == "Best over random-init 0.4940 ± 0.0060 sd: margin +0.0096 (95% interval -0.0120 to +0.0310)."
    se = math.sqrt(2) * 0.011
    assert lines[2] == (
        f"Best over the runner-up, trial 0 (0.4990 ± 0.0110 (SE over the test examples)): +0.0046 ± "
        f"{se:.4f} (SE of the difference): not distinguishable from trial 0 (|difference| < 2 SE)."
    )
    far = study_best_lines(made_study([0.40, 0.60], se=0.01))
    assert far[-1].endswith("distinguishable from trial 0 (|difference| >= 2 SE).")
    assert study_best_lines(optuna.create_study()) == []


def test_importances_need_ten_complete_trials():
    from selfsup.report.studies import study_importances, study_lines

    study = made_study([0.5, 0.6, 0.55])
    assert study_importances(study) == (None, "Parameter importances: need 10 completed trials, the study has 3.")
    assert study_lines(study)[-1] == "Parameter importances: need 10 completed trials, the study has 3."
    importances, line = study_importances(made_study([0.5 + 0.01 * i for i in range(10)]))
    assert list(importances) == ["optim.lr"] and line.startswith(
        "Parameter importances (Optuna's default evaluator, over 10 complete"
    )
    pruned = optuna.create_study()
    trial = pruned.ask()
    pruned.tell(trial, state=TrialState.PRUNED)
    assert not any("Best" in line or "importances" in line for line in study_lines(pruned))


def test_load_studies_shows_each_study_once(tmp_path):
    from selfsup.report.studies import load_studies

    first, more = tmp_path / "first", tmp_path / "more"
    first.mkdir(), more.mkdir()
    storage = f"sqlite:///{first / 'optuna.db'}"
    study = optuna.create_study(study_name="tune", storage=storage)
    study.tell(study.ask(), 1.0)
    for folder in (first, more):  # a continuation of the study from before it wrote into the study's folder
        (folder / "optimization_results.yaml").write_text(json.dumps({"study": "tune", "storage": storage}))
    for paths in ([first, more], [tmp_path], [first, first / "."]):
        found, problems = load_studies([str(p) for p in paths])
        assert [s.study_name for s in found] == ["tune"] and not problems, paths


def test_a_study_of_the_fixed_exam_reads_its_bootstrap_standard_error():
    """optimized_metric=eval/fixed/loss: one seed's trial carries the exam's own SE (eval/fixed/loss_se, the
    bootstrap over its windows), the one the pruner compares against at each validation."""
    from hydra_plugins.selfsup_sweeper.study import seed_record
    from selfsup.evaluation.suite import exam_interval

    rng = np.random.default_rng(0)
    count = rng.integers(10, 30, 200).astype(float)
    windows = {"nll": rng.normal(5 * count, np.sqrt(count)), "count": count, "member": np.repeat([0, 1], 100)}
    evaluated = {"eval/fixed/loss": 5.0, **exam_interval(windows)}
    one = seed_record("eval/fixed/loss", [5.0], [{"eval": evaluated}])
    assert one["value_se"] == evaluated["eval/fixed/loss_se"] > 0
    assert evaluated["eval/fixed/loss_se"] == pytest.approx(
        (evaluated["eval/fixed/loss_high"] - evaluated["eval/fixed/loss_low"]) / 3.92, rel=0.15
    )  # about the normal interval's half-width / 1.96
