"""requirements-django-newest.txt, what `make test-django-newest` installs over requirements.lock
(tests/ensure-newest-django.sh): each package it pins replaces that package's line in the lock, so
it must name a package the lock pins, spelled as the lock spells it, and Django newer than the LTS."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)$")


def pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        match = PIN.match(line.strip())
        if match:
            found[match[1]] = match[2]
    return found


def test_every_newest_pin_replaces_a_line_of_the_lock():
    lock, newest = pins(ROOT / "requirements.lock"), pins(ROOT / "requirements-django-newest.txt")
    assert "Django" in newest
    lock_names = {name.lower(): name for name in lock}
    for name in newest:
        assert name.lower() in lock_names, f"{name} is not in requirements.lock"
        assert lock_names[name.lower()] == name, f"{name} is spelled {lock_names[name.lower()]} in the lock"
    assert Version(newest["Django"]).major > Version(lock["Django"]).major


def test_the_script_refuses_a_python_older_than_django_needs(tmp_path):
    old = tmp_path / "python-3.11"
    old.write_text("#!/bin/sh\nexit 1\n")
    old.chmod(0o755)
    result = subprocess.run(
        ["bash", str(ROOT / "tests" / "ensure-newest-django.sh")],
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHON_NEWEST": str(old),
            "NEWEST_VENV": str(tmp_path / "venv"),
            "HOME": str(tmp_path),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert f"PYTHON_NEWEST={old} is not a working Python 3.12 or later" in result.stderr
    assert not (tmp_path / "venv").exists()
