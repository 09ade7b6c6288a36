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
    assert "Contracts: 2 kept, 0 broken." in done.stdout


def test_an_upward_import_breaks_the_layers_contract(tmp_path):
    """The contract is not vacuous: the data layer importing the run's entry point is reported."""
    source = tmp_path / "src"
    shutil.copytree(ROOT / "src", source, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "conf"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with (source / "selfsup" / "data" / "vocab.py").open("a") as f:
        f.write("\nfrom selfsup.train import main  # noqa: E402,F401\n")
    done = subprocess.run(
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
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "selfsup.data.vocab -> selfsup.train" in done.stdout


def test_ruff_finds_nothing_and_the_code_is_formatted():
    done = run(sys.executable, "-m", "ruff", "check", "src", "tests")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    done = run(sys.executable, "-m", "ruff", "format", "--check", "src", "tests")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]  # `ruff format src tests` formats it


def test_the_plain_torch_core_type_checks():
    done = run(sys.executable, "-m", "mypy")  # the files and settings: [tool.mypy] in pyproject.toml
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert done.stdout.startswith("Success: no issues found")
