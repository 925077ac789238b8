"""The warm Python of tests/warm_python.py answers as a new process would."""

import os
import sys
from pathlib import Path

from tests.warm_python import python_run

ROOT = Path(__file__).resolve().parent.parent


def test_a_run_gets_its_exit_status_output_and_environment():
    done = python_run(
        "-c",
        "import os, sys; print(os.environ['ONLY']); print(sorted(os.environ)); print('err', file=sys.stderr); sys.exit(3)",
        cwd=ROOT,
        env={"ONLY": "this", "PATH": os.environ["PATH"]},
    )
    assert done.returncode == 3
    assert done.stdout.splitlines() == ["this", "['ONLY', 'PATH']"]
    assert done.stderr == "err\n"


def test_an_exception_is_a_traceback_and_status_1():
    done = python_run("-c", "raise RuntimeError('no start')", cwd=ROOT, env={})
    assert done.returncode == 1
    assert "Traceback" in done.stderr and "RuntimeError: no start" in done.stderr


def test_a_run_imports_the_project_and_its_settings_itself(tmp_path):
    # Nothing of the project and no settings come from the warm process: each run reads its own.
    code = "import sys, os; print(sorted(m for m in ('config', 'core', 'billing', 'accounts') if m in sys.modules))"
    assert python_run("-c", code, cwd=ROOT, env={}).stdout.strip() == "[]"
    (tmp_path / "probe.py").write_text("import sys; print(sys.argv[1:], sys.path[0])\n")
    script = python_run(str(tmp_path / "probe.py"), "a", "b", cwd=ROOT, env={})
    assert script.stdout.strip() == f"['a', 'b'] {tmp_path}"
    extra = python_run("-c", "import probe", cwd=ROOT, env={"PYTHONPATH": str(tmp_path)})
    assert extra.returncode == 0 and extra.stdout.startswith("[]"), extra.stderr


def test_a_run_past_its_timeout_is_ended():
    done = python_run("-c", "import signal; signal.pause()", cwd=ROOT, env={}, timeout=1)
    assert done.returncode == -14  # SIGALRM


def test_the_same_python_runs_it():
    done = python_run("-c", "import sys; print(sys.prefix)", cwd=ROOT, env={})
    assert done.stdout.strip() == sys.prefix
