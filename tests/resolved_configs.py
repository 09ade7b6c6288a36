"""The resolved configuration of every option of every config group, as `selfsup-train OPTION --cfg job --resolve`
shows it (plus the sweeper's and launcher's settings), stored under tests/resolved/ as parsed data.

tests/test_resolved_configs.py compares today's composition with the stored files, so that a change of what a user
composes is deliberate: after one, refresh them with `python tests/resolved_configs.py` and review the diff."""

import json
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

STORED = Path(__file__).parent / "resolved"
SKIPPED_GROUPS = ("hydra", "schema")  # Hydra's own groups (launchers are taken below) and the structured schemas


def options(conf_dir: Path) -> list[str]:
    """`group=option` for each option of each config group, debug=tiny, and each launcher."""
    found = []
    for folder in sorted(p for p in conf_dir.iterdir() if p.is_dir() and p.name not in SKIPPED_GROUPS):
        found += [f"{folder.name}={f.stem}" for f in sorted(folder.glob("*.yaml"))]
    found += [f"hydra/launcher={f.stem}" for f in sorted((conf_dir / "hydra" / "launcher").glob("*.yaml"))]
    return found


def resolved(conf_dir: Path, option: str) -> dict:
    """The job's resolved config and the sweeper's, launcher's and callbacks' settings for one option."""
    with initialize_config_dir(str(conf_dir), version_base=None):
        cfg = compose("train", overrides=[option], return_hydra_config=True)
    hydra = {k: OmegaConf.to_container(cfg.hydra[k], resolve=False) for k in ("sweeper", "launcher", "callbacks")}
    with open_dict(cfg):
        del cfg["hydra"]
    return {"job": OmegaConf.to_container(cfg, resolve=True), "hydra": hydra}


def file_for(option: str) -> Path:
    return STORED / (option.replace("/", "-") + ".json")


def conf_dir_and_register():
    from selfsup.run.schema import config_dir, register

    register()
    return config_dir()


if __name__ == "__main__":
    conf = conf_dir_and_register()
    STORED.mkdir(exist_ok=True)
    for old in STORED.glob("*.json"):
        old.unlink()
    for option in options(conf):
        file_for(option).write_text(json.dumps(resolved(conf, option), indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(list(STORED.glob('*.json')))} resolved configs to {STORED}", file=sys.stderr)
