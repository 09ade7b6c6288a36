"""Pruning at validations (selfsup.training.tune.TrialPruning) with a real Optuna study and a real Lightning Trainer:
a trial below the median of the earlier trials by more than its metric's standard error stops at its first
validation; one above it, or below it by less than the SE, or with no SE logged, trains to the end."""

import logging

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel

optuna = pytest.importorskip("optuna")


class Scored(BoringModel):
    """Logs a fixed value of the metric the study optimises (and its standard error) at every validation."""

    def __init__(self, score: float, se: float | None):
        super().__init__()
        self.score, self.se = score, se

    def validation_step(self, batch, batch_idx):
        self.log("eval/probe/accuracy", torch.tensor(self.score))
        if self.se is not None:
            self.log("eval/probe/accuracy_se", torch.tensor(self.se))
        return super().validation_step(batch, batch_idx)


@pytest.mark.parametrize(
    "score,se,pruned", [(0.55, 0.01, True), (0.95, 0.01, False), (0.84, 0.05, False), (0.55, None, False)]
)
def test_a_trial_below_the_median_by_more_than_its_se_is_pruned_at_its_first_validation(
    tmp_path, caplog, score, se, pruned
):
    from selfsup.training.tune import TrialPruning

    storage = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    for value in (0.8, 0.9):  # two earlier trials, reported at steps 2, 4, 6: the median at each step is 0.85
        earlier = study.ask()
        for step in (2, 4, 6):
            earlier.report(value, step)
        study.tell(earlier, value)
    trial = study.ask()
    pruning = TrialPruning(
        {"storage": storage, "study": "s", "number": trial.number, "pruner": "median", "startup": 2, "warmup": 0},
        "eval/probe/accuracy",
    )
    trainer = Trainer(
        max_steps=6,
        val_check_interval=2,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        callbacks=[pruning],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    with caplog.at_level(logging.INFO, logger="selfsup"):
        trainer.fit(Scored(score, se))
    assert pruning.pruned is pruned
    assert trainer.global_step == (2 if pruned else 6)
    reported = optuna.load_study(study_name="s", storage=storage).trials[-1].intermediate_values
    assert reported == pytest.approx({2: score} if pruned else {2: score, 4: score, 6: score})  # (float32)
    text = caplog.text
    if pruned:
        assert (
            "trial 2 pruned at step 2: eval/probe/accuracy 0.5500, reference 0.8500 (median of 2 complete "
            "trials at step 2), worse by 0.3000 > SE 0.0100" in text
        )
    if se is None:
        assert text.count("trial 2: no eval/probe/accuracy_se logged at its validations: it is not pruned") == 1
    if score == 0.84:
        assert "trial 2 kept at step 2: eval/probe/accuracy 0.8400, reference 0.8500" in text
