"""An objective defined outside the package (docs/examples/replaced_token): one class, one yaml, one command."""

import json
import os
from pathlib import Path

import forked
import pytest
from conftest import TINY

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "replaced_token"


# a package installed and trained (~13 s); the default suite: tests/objectives/test_objectives.py builds objectives by
# their configs
@pytest.mark.slow
def test_an_objective_from_outside_the_package_trains_and_declares_its_architectures(cache_dir, tmp_path):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}, "PYTHONPATH": str(EXAMPLE)}
    command = [
        "selfsup-train",
        f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]",
        "objective=replaced_token",
        *TINY,
        "logger=csv",
        "eval.tasks=null",
        f"data.cache_dir={cache_dir}",
    ]
    out = forked.run(
        [*command, f"hydra.run.dir={tmp_path / 'run'}", "objective.replace_rate=0.3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["objective"], summary["architecture"], summary["status"]) == (
        "replaced_token",
        "encoder",
        "finished",
    )
    assert 0.2 < summary["signal_per_token"] < 0.4  # its replace_rate, a setting the lab's schemas never heard of
    assert summary["eval"]["eval/fixed/loss"] > 0  # the encoder family's fixed exam scores it like any encoder
    # the pairing it declares is checked like the lab's own (in-process: the same check the command runs)
    import sys

    import pytest
    from hydra import compose, initialize_config_dir

    from selfsup.errors import UserError
    from selfsup.run.build import check_settings
    from selfsup.run.cli import CONF_DIR
    from selfsup.run.schema import register

    register()
    sys.path.insert(0, str(EXAMPLE))
    try:
        with initialize_config_dir(str(CONF_DIR), version_base=None):
            cfg = compose(
                "train",
                overrides=[
                    f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]",
                    "objective=replaced_token",
                    "architecture=decoder",
                ],
            )
        with pytest.raises(
            UserError,
            match="^objective=replaced_token cannot train architecture=decoder: a causal "
            "decoder cannot see the right context of a swapped token$",
        ):
            check_settings(cfg)
    finally:
        sys.path.remove(str(EXAMPLE))
