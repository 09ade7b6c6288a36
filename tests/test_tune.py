"""Pruning at validations (selfsup.tune.TrialPruning) with a real Optuna study and a real Lightning Trainer:
a trial below the median of the earlier trials stops at its first validation; one above it trains to the end."""

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel

optuna = pytest.importorskip("optuna")


class Scored(BoringModel):
    """Logs a fixed value of the metric the study optimises at every validation."""

    def __init__(self, score: float):
        super().__init__()
        self.score = score

    def validation_step(self, batch, batch_idx):
        self.log("eval/probe/accuracy", torch.tensor(self.score))
        return super().validation_step(batch, batch_idx)


@pytest.mark.parametrize("score,pruned", [(0.55, True), (0.95, False)])
def test_a_trial_below_the_median_is_pruned_at_its_first_validation(tmp_path, score, pruned):
    from selfsup.tune import TrialPruning
    storage = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    for value in (0.8, 0.9):  # two earlier trials, reported at steps 2, 4, 6
        earlier = study.ask()
        for step in (2, 4, 6):
            earlier.report(value, step)
        study.tell(earlier, value)
    trial = study.ask()
    pruning = TrialPruning({"storage": storage, "study": "s", "id": trial._trial_id, "pruner": "median",
                            "startup": 2, "warmup": 0}, "eval/probe/accuracy")
    trainer = Trainer(max_steps=6, val_check_interval=2, limit_val_batches=1, num_sanity_val_steps=0,
                      callbacks=[pruning], logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)
    trainer.fit(Scored(score))
    assert pruning.pruned is pruned
    assert trainer.global_step == (2 if pruned else 6)
    reported = optuna.load_study(study_name="s", storage=storage).trials[-1].intermediate_values
    assert reported == pytest.approx({2: score} if pruned else {2: score, 4: score, 6: score})  # (float32)
