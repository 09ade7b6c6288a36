"""Every `selfsup-train` command the README and docs/ show composes, and passes the settings checks where it
can run here (in-process: the composition and the checks the command runs before reading data)."""

import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from selfsup.run.build import check_settings
from selfsup.run.cli import CONF_DIR
from selfsup.run.schema import register

ROOT = Path(__file__).parents[1]


def commands() -> list[tuple[str, list[str]]]:
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```bash\n(.*?)```", doc.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" # ")[0].split("&&")[-1].strip()
                if "selfsup-train" not in line:
                    continue
                line = line.replace("<date>", "2026-01-01").replace("<time>", "00-00-00")  # what a user fills in
                args = shlex.split(line[line.index("selfsup-train") + len("selfsup-train") :])
                if "-m" in args:  # a multirun: its first job
                    args = [re.sub(r"^([^=\[]+)=([^\[\]]*?),.*$", r"\1=\2", a) for a in args]
                found.append((f"{doc.name}: {line[:60]}", [a for a in args if a not in ("-m", "--cfg", "job")]))
    return found


COMMANDS = commands()


def eval_commands() -> list[tuple[str, list[str]]]:
    """The `selfsup-eval DIR [overrides]` commands of the README and docs/: (where, overrides)."""
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```bash\n(.*?)```", doc.read_text(), re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" # ")[0].strip()
                if line.startswith("selfsup-eval "):
                    found.append((f"{doc.name}: {line[:60]}", shlex.split(line)[2:]))
    return found


EVAL_COMMANDS = eval_commands()


@pytest.fixture(scope="module")
def lm_eval_tasks(tmp_path_factory) -> Path:
    """The lab's local lm-eval tasks, written once (lm-eval indexes a folder once per process)."""
    from selfsup.interop.lmeval import write_tasks

    folder = tmp_path_factory.mktemp("lm-eval-tasks")
    write_tasks(folder)
    return folder


# lm-eval's task index for the documented lm-eval commands (~30 s); the default suite composes every other documented
# command
@pytest.mark.slow
@pytest.mark.parametrize("where,args", EVAL_COMMANDS, ids=[w for w, _ in EVAL_COMMANDS])
def test_a_documented_selfsup_eval_command_composes(where, args, lm_eval_tasks):
    from selfsup.evaluation import Finetune, GenerationJob
    from selfsup.tools.evaluate import eval_config, is_lm_eval, lm_eval_config, plan_flag

    args = plan_flag(args)[1]
    lm = [a for a in args if is_lm_eval(a)]
    if lm:  # lm-eval's settings pass its checks (task names included; the lab's local tasks written where shown)
        lm_eval_config([re.sub(r"include_path=\[.*\]", f"include_path=[{lm_eval_tasks}]", a) for a in lm])
        if len(lm) == len(args):
            return
    cfg = eval_config([a for a in args if not is_lm_eval(a)])  # composes (a bad override: one UserError line)
    assert cfg.tasks or cfg.generation  # it evaluates something
    for name, job in (cfg.generation or {}).items():
        GenerationJob(**{k: v for k, v in job.items() if k != "_target_"}, name=name)  # settings it takes
    Finetune(**{k: v for k, v in cfg.finetune.items() if k != "_target_"}).check()


def test_the_docs_show_selfsup_eval_commands():
    assert len(EVAL_COMMANDS) >= 3


def test_the_docs_show_commands():
    assert len(COMMANDS) >= 15


def test_the_readme_is_a_front_page():
    """At most 160 lines, the first set-up command within the first 30, and no line over 120 characters outside the
    main job's printed output (the console block, as the sweep prints it)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 160
    assert next(i for i, line in enumerate(lines) if line.startswith("pip install")) < 30
    start, end = (lines.index(f"<!-- {mark}selfsup.report.docs:console -->") for mark in ("", "/"))
    assert [i + 1 for i, line in enumerate(lines) if len(line) > 120 and not start < i < end] == []


@pytest.mark.parametrize("where,args", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_a_documented_command_composes(where, args, monkeypatch):
    monkeypatch.chdir(ROOT)  # the docs' relative paths (docs/examples/...) are from the repository root
    register()
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose("train", overrides=args)
    runnable_here = not any(
        a.startswith(
            ("trainer=gpu", "trainer=ddp", "trainer=fsdp", "ckpt_path=", "resume=", "objective=replaced_token")
        )
        for a in args
    )
    if runnable_here:
        check_settings(cfg)
