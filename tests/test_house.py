"""The house rules a contributor's change is held to (docs/contributing.md): the layers never import upward and
no package's modules import each other in a cycle (import-linter, the contracts in pyproject.toml), ruff's
lint and format checks pass, and the plain-torch core type-checks (mypy)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_layers_never_import_upward_and_no_package_has_a_cycle():
    done = run(shutil.which("lint-imports") or "lint-imports", "--no-cache")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Contracts: 5 kept, 0 broken." in done.stdout


def lint_with(tmp_path, module: str, line: str) -> subprocess.CompletedProcess:
    """lint-imports over a copy of src/ in which `module` (a path under src/selfsup) ends with `line`."""
    source = tmp_path / "src"
    shutil.copytree(ROOT / "src", source, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "conf"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with (source / "selfsup" / module).open("a") as f:
        f.write(f"\n{line}  # noqa: E402,F401\n")
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from importlinter.cli import lint_imports_command; lint_imports_command()",
            "--no-cache",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(source), "PATH": "/usr/bin:/bin"},
    )


def test_an_upward_import_breaks_the_layers_contract(tmp_path):
    """The contract is not vacuous: the data layer importing the run's entry point is reported."""
    done = lint_with(tmp_path, "data/vocab.py", "from selfsup.run.cli import main")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "selfsup.data.vocab -> selfsup.run.cli" in done.stdout


def test_a_piece_that_reads_hydras_config_breaks_the_forbidden_contract(tmp_path):
    """Below the apps nothing imports omegaconf or hydra: an evaluation module that does is reported."""
    done = lint_with(tmp_path, "evaluation/probe.py", "from omegaconf import DictConfig")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "selfsup.evaluation.probe -> omegaconf" in done.stdout


def test_ruff_finds_nothing_and_the_code_is_formatted():
    done = run(sys.executable, "-m", "ruff", "check", "src", "tests")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    done = run(sys.executable, "-m", "ruff", "format", "--check", "src", "tests")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]  # `ruff format src tests` formats it


def test_the_plain_torch_core_type_checks():
    done = run(sys.executable, "-m", "mypy")  # the files and settings: [tool.mypy] in pyproject.toml
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.startswith("Success: no issues found")
