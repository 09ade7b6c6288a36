"""The run dir and the settings, checked before anything is written: files in the way, a dir in use,
non-finite numbers."""

import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir

from selfsup.errors import UserError
from selfsup.run.checks import check_values
from selfsup.run.cli import CONF_DIR
from selfsup.run.run_dir import check_new_path, check_resume_path, claim
from selfsup.run.schema import register


def test_a_run_dir_that_is_or_lies_under_a_file_is_refused(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("x")
    with pytest.raises(UserError, match="is a file: pick a folder"):
        check_new_path(f)
    with pytest.raises(UserError, match=f"lies under {f}, which is a file"):
        check_new_path(f / "run")
    with pytest.raises(UserError, match="is a file, not a run dir"):
        check_resume_path(f)
    with pytest.raises(UserError, match="does not exist"):
        check_resume_path(tmp_path / "typo")
    assert not (tmp_path / "typo").exists()  # nothing created


def test_a_dir_locked_by_another_process_is_refused(tmp_path):
    run = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from selfsup.run.run_dir import claim, own; claim(Path(sys.argv[1])); own(Path(sys.argv[1])); "
            "print('held', flush=True); "
            "sys.stdin.read()",
            str(run),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=rf"is in use by another selfsup-train \(pid {holder.pid}\)"):
            claim(run)
    finally:
        holder.communicate("", timeout=30)
    claim(run)  # released when its holder ended


@pytest.mark.parametrize(
    "override",
    [
        "objective.mask_rate=nan",
        "objective.mask_token_prob=nan",
        "architecture.dropout=nan",
        "optim.weight_decay=nan",
        "optim.lr=inf",
        "trainer.max_flops=inf",
        "data.val_fraction=nan",
        "eval.finetune.lr=nan",
    ],
)
def test_every_non_finite_setting_is_refused(override):
    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose("train", overrides=[override])
    with pytest.raises(UserError, match=rf"^{override.split('=')[0]}=(nan|inf) is not a finite number"):
        check_values(cfg)
