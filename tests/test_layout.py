"""The test suite's own rules: a test module never imports another test module
(shared fixtures and harnesses live in conftest.py or helper modules), so any
module runs alone, in any order, on any xdist worker."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _imported_modules(source: str, *, package: tuple[str, ...]) -> set[str]:
    """Every module (and `from` name) `source` imports; relative imports are
    resolved against `package`, the parts of the importing module's package."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _is_test_module(name: str) -> bool:
    return name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_")


def test_no_test_module_imports_another():
    offenders = {}
    for path in sorted(TESTS.rglob("*.py")):
        relative = path.relative_to(TESTS)
        package = path.relative_to(TESTS.parent).parent.parts
        imported = sorted(m for m in _imported_modules(path.read_text(), package=package) if _is_test_module(m))
        if imported:
            offenders[str(relative)] = imported
    assert offenders == {}, "move what they share into conftest.py or a helper module not named test_*"


def test_the_rule_catches_an_import_of_a_test_module():
    def caught(source: str) -> set[str]:
        return {m for m in _imported_modules(source, package=("tests", "billing")) if _is_test_module(m)}

    assert caught("from tests.billing.test_keys import MNEMONIC") == {"tests.billing.test_keys"}
    assert caught("import tests.core.test_schema") == {"tests.core.test_schema"}
    assert caught("from .test_keys import MNEMONIC") == {"tests.billing.test_keys"}
    assert caught("from ..core import test_schema") == {"tests.core.test_schema"}
    assert caught("def f():\n    from tests.rentals.test_orders import new_key_line") == {"tests.rentals.test_orders"}
    assert caught("from tests.billing.key_vectors import MNEMONIC\nfrom tests.chains import harness") == set()
    assert caught("from . import conftest\nimport pytest") == set()
