"""Write the table of `vllm bench serve` arguments and result fields one vLLM
release defines, read from that release's own source (no vLLM install needed:
the wheel is read as a zip, like devtools/vllm_args.py reads `vllm serve`'s).

    pip download vllm==0.9.2 --no-deps -d DIR
    python -m devtools.vllm_bench DIR/vllm-0.9.2-*.whl sizing/data/vllm_bench_0.9.2.json

Arguments: every `add_argument("--flag", ...)` in vllm/benchmarks/serve.py
(add_cli_args) and in the datasets module it draws its dataset flags from
(vllm/benchmarks/datasets.py, or vllm/benchmarks/datasets/datasets.py in later
releases: add_dataset_parser), with the explicit `type`, `choices`, `action` and
`nargs`; `choices=list(ASYNC_REQUEST_FUNCS.keys())` is resolved from the
endpoint module's dict.

Result fields: what `--save-result` writes: the keys main() sets on
`result_json`, the keys of the `result` dict benchmark() returns, and the
statistics process_one_metric() adds per metric (mean_/median_/std_/p<N>_<metric>_ms);
`detailed_only` lists the per-request lists main() deletes unless --save-detailed.
tests/sizing/test_benchmarks.py checks every bench line against the table.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

from devtools.vllm_args import SCALARS, Source

SERVE = "vllm/benchmarks/serve.py"
DATASETS = ("vllm/benchmarks/datasets.py", "vllm/benchmarks/datasets/datasets.py")
ENDPOINTS = ("vllm/benchmarks/endpoint_request_func.py", "vllm/benchmarks/lib/endpoint_request_func.py")
CLI = "vllm/entrypoints/cli/benchmark/serve.py"


def _first(source: Source, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if n in source.names), None)


def _dict_keys(tree: ast.AST, name: str) -> list[str]:
    for node in ast.walk(tree):
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and isinstance(node.value, ast.Dict):
            return [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
    return []


def arguments(source: Source) -> dict[str, dict[str, Any]]:
    endpoints = _first(source, ENDPOINTS)
    request_funcs = _dict_keys(ast.parse(source.read(endpoints)), "ASYNC_REQUEST_FUNCS") if endpoints else []
    table: dict[str, dict[str, Any]] = {}
    for name in (SERVE, _first(source, DATASETS)):
        if name is None:
            continue
        for node in ast.walk(ast.parse(source.read(name))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
                continue
            flags = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            if not flags:
                continue
            keywords = {kw.arg: kw.value for kw in node.keywords if kw.arg}
            spec: dict[str, Any] = {"type": "str"}
            kind = keywords.get("type")
            if isinstance(kind, ast.Name) and kind.id in SCALARS:
                spec["type"] = SCALARS[kind.id]
            action = keywords.get("action")
            if isinstance(action, ast.Constant) and action.value in ("store_true", "store_false"):
                spec = {"type": "flag"}
            elif action is not None and "BooleanOptionalAction" in ast.unparse(action):
                spec = {"type": "flag", "negatable": True}
            choices = keywords.get("choices")
            if choices is not None:
                try:
                    values = ast.literal_eval(choices)
                    spec["choices"] = sorted(values) if isinstance(values, (set, frozenset)) else list(values)
                except ValueError:
                    if "ASYNC_REQUEST_FUNCS" in ast.unparse(choices) and request_funcs:
                        spec["choices"] = request_funcs
            nargs = keywords.get("nargs")
            if isinstance(nargs, ast.Constant) and nargs.value in ("+", "*"):
                spec["multiple"] = True
            for flag in flags:
                table[flag[2:]] = spec
    return dict(sorted(table.items()))


def _function(tree: ast.AST, name: str) -> ast.AST | None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def result_fields(source: Source) -> dict[str, Any]:
    tree = ast.parse(source.read(SERVE))
    written: list[str] = []
    main = _function(tree, "main_async") or _function(tree, "main")
    detailed: list[str] = []
    for node in ast.walk(main):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id == "result_json"
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.ctx, ast.Store)
        ):
            written.append(node.slice.value)
        if isinstance(node, ast.For) and isinstance(node.iter, ast.List):
            values = [e.value for e in node.iter.elts if isinstance(e, ast.Constant)]
            if "ttfts" in values:
                detailed = values
    bench = _function(tree, "benchmark")
    result: list[str] = []
    metrics: list[str] = []
    for node in ast.walk(bench):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "result" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            result += [k.value for k in node.value.keys if isinstance(k, ast.Constant) and k.value not in result]
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", "") == "process_one_metric"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            metrics.append(node.args[0].value)
    return {
        "main": list(dict.fromkeys(written)),
        "benchmark": result,
        "metrics": metrics,
        "statistics": ["mean_{metric}_ms", "median_{metric}_ms", "std_{metric}_ms", "p{percentile}_{metric}_ms"],
        "detailed_only": detailed,
    }


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        raise SystemExit(__doc__)
    source = Source(Path(argv[0]))
    version = source.version()
    table = {
        "release": version,
        "about": f"`vllm bench serve` of vLLM {version}, generated by devtools/vllm_bench.py from the release's "
        "vllm/benchmarks/serve.py (add_cli_args, benchmark, main) and its datasets module (add_dataset_parser); "
        "`result` lists the fields --save-result writes.",
        "bench_serve": CLI in source.names,
        "arguments": arguments(source),
        "result": result_fields(source),
    }
    Path(argv[1]).write_text(json.dumps(table, indent=1) + "\n")
    print(f"vLLM {version}: {len(table['arguments'])} bench arguments, `vllm bench serve`: {table['bench_serve']}")


if __name__ == "__main__":
    main(sys.argv[1:])
