"""Checking a `vllm bench serve` line against the release's own argument table
(sizing/data/vllm_bench_<release>.json, generated from the release's
vllm/benchmarks/serve.py and datasets module by devtools/vllm_bench.py)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent.parent / "sizing" / "data"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "vllm_bench"


def bench_table(release: str) -> dict:
    return json.loads((DATA / f"vllm_bench_{release}.json").read_text())


def check_bench_line(command: str, release: str) -> dict[str, str | None]:
    """The line's flags (None for a switch), after checking each against the release's table."""
    defined = bench_table(release)
    assert defined["release"] == release and defined["bench_serve"], release
    words = shlex.split(command)
    assert words[:3] == ["vllm", "bench", "serve"], command
    flags: dict[str, str | None] = {}
    rest = words[3:]
    while rest:
        word = rest.pop(0)
        assert word.startswith("--"), (command, word)
        name = word[2:]
        spec = defined["arguments"].get(name)
        assert spec is not None, f"vLLM {release}'s bench has no --{name}"
        assert name not in flags, f"--{name} twice"
        if spec["type"] == "flag":
            flags[name] = None
            continue
        assert rest and not rest[0].startswith("--"), f"--{name} needs a value"
        value = rest.pop(0)
        if spec["type"] == "int":
            assert (value.isdigit() and int(value) > 0) or name == "seed", (name, value)
        elif spec["type"] == "float":
            assert value == "inf" or float(value) >= 0, (name, value)
        if "choices" in spec:
            assert value in [str(c) for c in spec["choices"]], (release, name, value)
        flags[name] = value
    return flags


def written_fields(release: str, percentiles: list[str]) -> set[str]:
    """The fields `--save-result` writes without --save-detailed, no ramp-up, no --metadata,
    for the percentile metrics and percentiles given."""
    result = bench_table(release)["result"]
    ramp = {"ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps"}
    fields = (set(result["main"]) - ramp) | set(result["benchmark"])
    fields -= set(result["detailed_only"])
    for metric in result["metrics"]:
        fields |= {f"mean_{metric}_ms", f"median_{metric}_ms", f"std_{metric}_ms"}
        fields |= {f"p{p}_{metric}_ms" for p in percentiles}
    return fields
