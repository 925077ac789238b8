"""Which way imports point (.importlinter): the tree keeps the contracts, and
a deliberate violation breaks them, so `make lint` cannot pass by accident."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _root_packages() -> list[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return config["importlinter"]["root_packages"].split()


def test_the_tree_keeps_its_import_contracts():
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_forbidden_import_breaks_the_contracts(tmp_path):
    """The project's own contracts, over a tree of empty apps where core
    imports rentals and billing imports devtools."""
    for package in _root_packages():
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "core" / "shortcut.py").write_text("from rentals import models\n")
    (tmp_path / "rentals" / "models.py").write_text("")
    (tmp_path / "billing" / "sandbox.py").write_text("import devtools\n")
    (tmp_path / ".importlinter").write_text((ROOT / ".importlinter").read_text())

    result = _lint_imports(tmp_path)

    assert result.returncode != 0
    out = " ".join(result.stdout.split())
    assert "core imports no app BROKEN" in out
    assert "core.shortcut -> rentals.models" in out
    assert "billing imports no rentals, accounts or webhooks BROKEN" in out
    assert "catalog imports only core KEPT" in out
