#!/usr/bin/env python
import os
import sys
from pathlib import Path

# The local-run commands (devtools: sandbox_pay, sandbox_handover, sandbox_invoice, serve_local) exist
# only with DEBUG on; without it, say so instead of failing on the production settings' checks.
LOCAL_COMMANDS = Path(__file__).resolve().parent / "devtools" / "management" / "commands"


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    debug = os.environ.get("DEBUG", "").strip().lower() in ("1", "true", "yes", "on", "y", "ok")
    if command and not command.startswith("_") and (LOCAL_COMMANDS / f"{command}.py").is_file() and not debug:
        sys.stderr.write(
            f"CommandError: sandbox_off: `manage.py {command}` is for the local sandbox only: run it as "
            f"`DEBUG=1 .venv/bin/python manage.py {command} ...` while `make run` runs (with its DATA_DIR).\n"
        )
        sys.exit(1)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
