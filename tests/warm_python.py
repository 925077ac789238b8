"""Start-up checks in a fresh process, without paying for the imports each time.

Several tests prove what a process does when it starts with given settings (a
production `manage.py check --deploy`, a refusal to start with a private key or
with devtools installed). Each needs its own process: the settings are read once,
at start-up. Most of such a start is importing the third-party libraries
(web3 and its elliptic-curve tables, psycopg, httpx, ...), the same every time.

`python_run()` runs such a process as a fork of a warm Python: one server per
test process has imported those libraries, and nothing of the project and no
settings; each run is a fresh child of it, with its own environment, working
folder, argv and sys.path, which then imports the project and reads its settings
exactly as `python manage.py ...` or `python -c ...` would. It answers like
`subprocess.run(..., capture_output=True, text=True)`. The child's exit status,
its standard output and its standard error (a traceback included) are what the
tests see.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# Third-party modules that need no settings to import and cost the most to import
# (python -X importtime manage.py check). Nothing of the project is imported here.
PREIMPORTED = (
    "importlib.metadata",
    "django",
    "django.contrib.admin",
    "django.core.management",
    "django.db.backends.postgresql.base",
    "django.db.models",
    "django.forms",
    "django.http",
    "environ",
    "psycopg",
    "redis",
    "celery.app",
    "kombu",
    "rest_framework.fields",
    "rest_framework.serializers",
    "drf_spectacular",
    "httpx",
    "requests",
    "aiohttp",
    "trio",
    "cryptography",
    "pydantic",
    "web3",
    "eth_account",
    "eth_abi",
    "eth_keys",
    "eth_utils",
    "parsimonious",
    "bip_utils",
    "bitcoin",
    "solders.rpc",
    "monero",
    "pytoniq_core",
    "segno",
    "standardwebhooks",
    "rich",
)

_SERVER = r"""
import atexit, importlib, json, os, signal, sys, tempfile, traceback

for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
base_path = list(sys.path[1:])
channel_in = os.fdopen(os.dup(0), "r")
channel_out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(2, 1)


def child(request, out, err):
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    argv = request["argv"]
    if argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path[:] = ["", *extra, *base_path]
        main = lambda: exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    else:
        script = os.path.abspath(argv[0])
        sys.argv = list(argv)
        sys.path[:] = [os.path.dirname(script), *extra, *base_path]
        import runpy
        main = lambda: runpy.run_path(script, run_name="__main__")
    signal.alarm(int(request["timeout"]))
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


for line in channel_in:
    request = json.loads(line)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                child(request, out.fileno(), err.fileno())
            finally:
                os._exit(70)
        _, status = os.waitpid(pid, 0)
        answer = {"returncode": os.waitstatus_to_exitcode(status)}
        for name, stream in (("stdout", out), ("stderr", err)):
            stream.seek(0)
            answer[name] = stream.read().decode(errors="replace")
    channel_out.write(json.dumps(answer) + "\n")
    channel_out.flush()
"""


class WarmPython:
    """One server process (started on first use, ended when the test process ends)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def _start(self) -> subprocess.Popen:
        # No settings module and nothing of the test run's environment while the libraries load.
        env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (open as long as the server runs)
        process = subprocess.Popen(
            [sys.executable, "-c", _SERVER, json.dumps(PREIMPORTED)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
            cwd=tempfile.gettempdir(),
        )
        atexit.register(self.stop)
        return process

    def run(
        self, argv: list[str], *, cwd: Path | str, env: dict[str, str], timeout: float
    ) -> subprocess.CompletedProcess:
        with self._lock:
            if self._process is None or self._process.poll() is not None:
                self._process = self._start()
            request = {"argv": list(map(str, argv)), "cwd": str(cwd), "env": env, "timeout": max(1, int(timeout))}
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            line = self._process.stdout.readline()
            if not line:
                self._stderr.seek(0)
                raise RuntimeError(f"the warm Python server ended: {self._stderr.read().decode(errors='replace')}")
        answer = json.loads(line)
        return subprocess.CompletedProcess(
            [sys.executable, *argv], answer["returncode"], stdout=answer["stdout"], stderr=answer["stderr"]
        )

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.stdin.close()
            self._process.wait(timeout=30)


_WARM = WarmPython()


def python_run(*argv: str, cwd: Path | str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    """`subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True,
    text=True, timeout=timeout)` as a fork of the warm Python. `argv` is a script
    and its arguments (`"manage.py", "check"`) or `"-c", code`. A run still going
    after `timeout` seconds is ended by SIGALRM (returncode -14)."""
    return _WARM.run(list(argv), cwd=cwd, env=env, timeout=timeout)
