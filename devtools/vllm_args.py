"""Write the table of `vllm serve` arguments one vLLM release defines, read from
that release's own source (no vLLM install needed: the wheel is read as a zip).

    pip download vllm==0.9.2 --no-deps -d DIR
    python -m devtools.vllm_args DIR/vllm-0.9.2-*.whl sizing/data/vllm_args_0.9.2.json

It walks `vllm/engine/arg_utils.py` (EngineArgs.add_cli_args): every
`add_argument("--flag", ...)`, with its explicit `type`, `choices` and `action`,
and for flags whose keywords come from `get_kwargs(SomeConfig)["field"]` the
field's annotation in vLLM's config dataclasses (`vllm/config.py`, or the
`vllm/config/` package in later releases): int, float, bool, str, or the values
of a `Literal` (resolved through aliases such as `CacheDType` or
`QuantizationMethods`). It also lists the environment variables `vllm/envs.py`
reads. tests/sizing/test_vllm_args.py checks every launch line against the table.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

SCALARS = {"int": "int", "float": "float", "bool": "bool", "str": "str"}


class Source:
    """The .py files of a wheel (or an unpacked directory), by path inside the package."""

    def __init__(self, path: Path):
        self.path = path
        if path.is_file():
            self.zip = zipfile.ZipFile(path)
            self.names = [n for n in self.zip.namelist() if n.endswith(".py")]
        else:
            self.zip = None
            self.names = [str(p.relative_to(path)) for p in path.rglob("*.py")]

    def read(self, name: str) -> str:
        if self.zip is not None:
            return self.zip.read(name).decode()
        return (self.path / name).read_text()

    def version(self) -> str:
        text = self.read("vllm/_version.py")
        match = re.search(r"""version\s*=\s*['"]([^'"]+)['"]""", text) or re.search(
            r"""__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", text
        )
        if match is None:
            raise SystemExit("no version in vllm/_version.py")
        return match.group(1)


def _literal_values(node: ast.AST) -> list[Any] | None:
    """The values of a Literal[...] subscript."""
    if isinstance(node, ast.Subscript) and getattr(node.value, "id", getattr(node.value, "attr", "")) == "Literal":
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        values = [e.value for e in elts if isinstance(e, ast.Constant)]
        return values if len(values) == len(elts) else None
    return None


def aliases(source: Source) -> dict[str, ast.AST]:
    """Module-level `Name = <annotation>` (and `Name: TypeAlias = ...`) across vLLM's config-ish modules."""
    out: dict[str, ast.AST] = {}
    for name in source.names:
        if not name.startswith("vllm/") or "/tests/" in name:
            continue
        if not (name.startswith("vllm/config") or "quantization/__init__" in name or name.endswith("arg_utils.py")):
            continue
        tree = ast.parse(source.read(name))
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                out.setdefault(node.targets[0].id, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                out.setdefault(node.target.id, node.value)
            elif type(node).__name__ == "TypeAlias" and isinstance(getattr(node, "name", None), ast.Name):
                out.setdefault(node.name.id, node.value)
    return out


def resolve(node: ast.AST, names: dict[str, ast.AST], depth: int = 0) -> dict[str, Any]:
    """{"type": ..., "choices": [...]} for an annotation."""
    if depth > 8:
        return {"type": "str"}
    values = _literal_values(node)
    if values is not None:
        kinds = {type(v).__name__ for v in values}
        return {"type": kinds.pop() if len(kinds) == 1 else "str", "choices": values}
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        try:
            return resolve(ast.parse(node.value, mode="eval").body, names, depth + 1)
        except SyntaxError:
            return {"type": "str"}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # X | None
        parts = [p for p in (node.left, node.right) if not (isinstance(p, ast.Constant) and p.value is None)]
        return _union(parts, names, depth)
    if isinstance(node, ast.Subscript):
        head = getattr(node.value, "id", getattr(node.value, "attr", ""))
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head in ("Optional", "SkipValidation", "Annotated", "Union", "ClassVar"):
            if head == "Annotated":
                inner = inner[:1]
            parts = [p for p in inner if not (isinstance(p, ast.Constant) and p.value is None)]
            return _union(parts, names, depth)
        if head in ("list", "List", "tuple", "Tuple", "dict", "Dict", "set"):
            return {"type": "str", "multiple": True}
    if isinstance(node, ast.Name):
        if node.id in SCALARS:
            return {"type": SCALARS[node.id]}
        if node.id in names:
            return resolve(names[node.id], names, depth + 1)
    return {"type": "str"}


def _union(parts: list[ast.AST], names: dict[str, ast.AST], depth: int) -> dict[str, Any]:
    resolved = [resolve(p, names, depth + 1) for p in parts]
    choices = [c for r in resolved for c in r.get("choices", [])]
    if choices and all("choices" in r for r in resolved):
        return {"type": "str", "choices": choices}
    # A union with a free-form member (str, torch.dtype, a dict) takes any value of its kinds.
    kinds = {r["type"] for r in resolved}
    if choices:
        return {"type": "str", "choices": choices, "open": True}
    return {"type": kinds.pop() if len(kinds) == 1 else "str"}


def config_fields(source: Source, names: dict[str, ast.AST]) -> dict[str, dict[str, dict[str, Any]]]:
    """{ConfigClass: {field: type}} from vLLM's config dataclasses."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in source.names:
        if not (name == "vllm/config.py" or name.startswith("vllm/config/")):
            continue
        for node in ast.walk(ast.parse(source.read(name))):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Config"):
                fields = out.setdefault(node.name, {})
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        fields[item.target.id] = resolve(item.annotation, names)
    return out


def _kw_source(value: ast.AST) -> list[tuple[str, str]]:
    """(kwargs variable, field) pairs a `**...` keyword draws from."""
    found = []
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name):
        if isinstance(value.slice, ast.Constant):
            found.append((value.value.id, value.slice.value))
    elif isinstance(value, ast.Dict):
        for key, item in zip(value.keys, value.values, strict=True):
            if key is None:
                found += _kw_source(item)
    return found


def _explicit(value: ast.AST) -> dict[str, ast.AST]:
    if isinstance(value, ast.Dict):
        return {k.value: v for k, v in zip(value.keys, value.values, strict=True) if isinstance(k, ast.Constant)}
    return {}


def arguments(source: Source) -> dict[str, dict[str, Any]]:
    names = aliases(source)
    fields = config_fields(source, names)
    tree = ast.parse(source.read("vllm/engine/arg_utils.py"))
    kwargs_of: dict[str, str] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", "") == "get_kwargs"
            and node.value.args
            and isinstance(node.value.args[0], ast.Name)
        ):
            kwargs_of[node.targets[0].id] = node.value.args[0].id
    table: dict[str, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
        if not flags:
            continue
        spec: dict[str, Any] = {"type": "str"}
        explicit: dict[str, ast.AST] = {}
        for kw in node.keywords:
            if kw.arg is None:
                for var, field in _kw_source(kw.value):
                    cls = kwargs_of.get(var)
                    if cls and field in fields.get(cls, {}):
                        spec = {**fields[cls][field], "config": f"{cls}.{field}"}
                explicit.update(_explicit(kw.value))
            else:
                explicit[kw.arg] = kw.value
        if "choices" in explicit:
            with contextlib.suppress(ValueError):  # choices computed at run time: the annotation's stand
                spec["choices"] = ast.literal_eval(explicit["choices"])
        if "type" in explicit and isinstance(explicit["type"], ast.Name) and explicit["type"].id in SCALARS:
            spec["type"] = SCALARS[explicit["type"].id]
        action = explicit.get("action")
        if isinstance(action, ast.Constant) and action.value in ("store_true", "store_false"):
            spec = {"type": "flag"}
        for flag in flags:
            table[flag[2:]] = spec
    return dict(sorted(table.items()))


def environment(source: Source) -> list[str]:
    text = source.read("vllm/envs.py")
    return sorted(set(re.findall(r'^\s*"(VLLM_[A-Z0-9_]+)"\s*:', text, flags=re.M)))


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit(__doc__)
    source = Source(Path(argv[0]))
    version = source.version()
    table = {
        "release": version,
        "about": f"`vllm serve` arguments of vLLM {version}, generated by devtools/vllm_args.py from the release's "
        "vllm/engine/arg_utils.py (EngineArgs.add_cli_args) and its config dataclasses; `environment` lists "
        "the variables vllm/envs.py reads.",
        "arguments": arguments(source),
        "environment": environment(source),
    }
    Path(argv[1]).write_text(json.dumps(table, indent=1, sort_keys=False) + "\n")
    print(f"vLLM {version}: {len(table['arguments'])} arguments, {len(table['environment'])} variables")


if __name__ == "__main__":
    main(sys.argv[1:])
