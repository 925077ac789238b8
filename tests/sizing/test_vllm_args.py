"""Every launch line the sizing writes starts on the release it names: each flag
and value is checked against that release's own argument definitions
(sizing/data/vllm_args_<release>.json, generated from the release's
vllm/engine/arg_utils.py by devtools/vllm_args.py)."""

import json
import shlex
from decimal import Decimal
from pathlib import Path

import pytest

from sizing.arithmetic import Workload
from sizing.engine import engine_check, engine_versions, newest_version, template_version

from .conftest import arch, card

DATA = Path(__file__).resolve().parent.parent.parent / "sizing" / "data"
MODELS = [
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "mixtral-8x7b",
    "gpt-oss-20b",
    "deepseek-v3",
    "llama-4-scout",
    "llama-4-maverick",
    "qwen3-235b-a22b",
    "ref-7b",
]
PRECISIONS = ["bf16", "fp16", "fp8", "int8", "awq", "gptq", "mxfp4", "nvfp4"]
GPUS = ["h100-sxm", "a100-sxm", "l40s", "b200", "mi300x", "rtx-4090"]


def table(release: str) -> dict:
    return json.loads((DATA / f"vllm_args_{release}.json").read_text())


def check_line(command: str, release: str) -> dict[str, str]:
    """The line's flags, after checking each against the release's table."""
    defined = table(release)
    assert defined["release"] == release
    words = shlex.split(command)
    while "=" in words[0]:
        name = words.pop(0).split("=")[0]
        assert name in defined["environment"], (release, name)
    assert words[:2] == ["vllm", "serve"] and not words[2].startswith("-")
    flags: dict[str, str] = {}
    rest = words[3:]
    assert len(rest) % 2 == 0, command
    for flag, value in zip(rest[::2], rest[1::2], strict=True):
        assert flag.startswith("--"), command
        name = flag[2:]
        spec = defined["arguments"].get(name)
        assert spec is not None, f"vLLM {release} has no --{name}"
        assert spec["type"] != "flag", name
        if spec["type"] == "int":
            assert value.isdigit() and int(value) > 0, (name, value)
        elif spec["type"] == "float":
            assert 0 < float(value) <= 1, (name, value)
        if "choices" in spec:
            assert value in [str(c) for c in spec["choices"]], (release, name, value)
        flags[name] = value
    return flags


def test_the_tables_are_the_releases_the_sizing_knows():
    assert set(engine_versions()) == {template_version(), newest_version()}
    for release in engine_versions():
        args = table(release)["arguments"]
        assert args["tensor-parallel-size"]["type"] == "int"
        assert "fp8" in args["kv-cache-dtype"]["choices"] and "fp8" in args["quantization"]["choices"]


def test_a_flag_the_release_lacks_is_caught():
    with pytest.raises(AssertionError):
        check_line("vllm serve m --no-such-flag 1", template_version())
    with pytest.raises(AssertionError):
        check_line("vllm serve m --kv-cache-dtype fp4", template_version())
    with pytest.raises(AssertionError):
        check_line("VLLM_USE_V1=0 vllm serve m --tensor-parallel-size 2", newest_version())  # no V0 there


@pytest.mark.parametrize("release", ["0.9.2", "0.34.0"])
@pytest.mark.parametrize("gpu", GPUS)
def test_every_launch_line_passes_the_release_argument_check(release, gpu):
    lines = 0
    for slug in MODELS:
        a = arch(slug)
        for precision in PRECISIONS:
            for kv in ("bf16", "fp8"):
                for count in (1, 2, 8):
                    for context, concurrency in ((4096, 1), (32768, 8)):
                        if context > a.max_context:
                            continue
                        w = Workload(
                            arch=a,
                            precision=precision,
                            kv_precision=kv,
                            context=context,
                            concurrency=concurrency,
                            profile="vllm",
                            max_gpu_memory_utilization=Decimal("0.95"),
                            engine_version=release,
                        )
                        if not engine_check(workload=w, card=card(gpu), gpu_count=count, brief=True).fits:
                            continue
                        check = engine_check(workload=w, card=card(gpu), gpu_count=count)
                        launch = check.engine.launch
                        flags = check_line(launch.command, release)
                        assert flags["max-num-seqs"] == str(concurrency)  # the concurrency the answer claims
                        assert flags["tensor-parallel-size"] == str(count)
                        assert Decimal(flags["gpu-memory-utilization"]) >= check.engine.utilization_min
                        if launch.env.get("VLLM_USE_V1") == "0":
                            assert int(flags["max-num-batched-tokens"]) >= int(flags["max-model-len"])
                        lines += 1
    assert lines > 10
