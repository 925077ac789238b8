"""Record a `vllm bench serve --save-result` file without a GPU: the release's
own bench code (vllm/benchmarks/serve.py main, benchmark, calculate_metrics;
vllm/benchmarks/datasets.py RandomDataset; vllm/benchmarks/utils.py), read from
its wheel and run unchanged, against a synthetic server in place of the HTTP
request function. The file's fields, their names and their arithmetic are the
release's; the timings are the synthetic server's.

Run it with a Python that has numpy (the bench's own dependency; the project's
virtualenv does not need it), from the repository root:

    pip download vllm==0.9.2 --no-deps -d DIR
    python3 devtools/vllm_bench_record.py DIR/vllm-0.9.2-*.whl OUTDIR \\
        --ttft-ms 210 --tpot-ms 44 --max-num-seqs 8 [--fail-every N] -- \\
        <the arguments of a plan's `vllm bench serve` line>

The synthetic server holds at most --max-num-seqs requests (the launch line's
--max-num-seqs): a request waits for a slot, then its first token comes after
--ttft-ms scaled by its prompt length over the mean, and each further token
after --tpot-ms, each with a +-10 % jitter (seeded). With --fail-every N every
Nth request (after the bench's initial test request) is answered 400 Bad
Request, as the server answers a prompt past --max-model-len. Simulated time
runs 1,000 times faster than the clock, and the bench reads it through
time.perf_counter. The tokenizer stands in for the model's: token ids as text.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
import types
import zipfile
from pathlib import Path

SCALE = 1000.0
SOURCES = {
    "vllm.benchmarks.utils": "vllm/benchmarks/utils.py",
    "vllm.benchmarks.datasets": "vllm/benchmarks/datasets.py",
    "vllm.benchmarks.endpoint_request_func": "vllm/benchmarks/endpoint_request_func.py",
    "vllm.benchmarks.serve": "vllm/benchmarks/serve.py",
}


class Tokenizer:
    """Token ids written as text: decode and encode are exact inverses."""

    vocab_size = 128_256

    def num_special_tokens_to_add(self) -> int:
        return 1  # a BOS token, as Llama's tokenizer adds

    def decode(self, ids) -> str:
        return " ".join(str(int(i)) for i in ids)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [int(t) for t in text.split()]

    def __call__(self, text: str, add_special_tokens: bool = False):
        return types.SimpleNamespace(input_ids=self.encode(text))


def _stub(name: str, **attrs) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    module.__path__ = []  # a package, so submodules import
    sys.modules[name] = module
    return module


def _stubs() -> None:
    class Anything:
        def __init__(self, *args, **kwargs):
            pass

    class Placeholder:
        def __init__(self, name):
            self.name = name

        def placeholder_attr(self, _name):
            return None

    _stub("tqdm")
    _stub("tqdm.asyncio", tqdm=Anything)
    _stub("transformers", PreTrainedTokenizerBase=object)
    _stub("PIL", Image=types.SimpleNamespace(Image=object))
    _stub("PIL.Image", Image=object)
    _stub("aiohttp", ClientTimeout=Anything, ClientSession=Anything)
    _stub("vllm")
    _stub("vllm.benchmarks")
    _stub("vllm.lora")
    _stub("vllm.lora.request", LoRARequest=object)
    _stub("vllm.lora.utils", get_adapter_absolute_path=lambda p: p)
    _stub("vllm.multimodal", MultiModalDataDict=dict)
    _stub("vllm.multimodal.image", convert_image_mode=lambda i, m: i)
    _stub("vllm.transformers_utils")
    _stub(
        "vllm.transformers_utils.tokenizer",
        AnyTokenizer=object,
        get_lora_tokenizer=lambda *a, **k: None,
        get_tokenizer=lambda *a, **k: Tokenizer(),
    )
    _stub("vllm.utils", PlaceholderModule=Placeholder, FlexibleArgumentParser=argparse.ArgumentParser)


def _load(wheel: Path) -> dict[str, types.ModuleType]:
    _stubs()
    loaded = {}
    with zipfile.ZipFile(wheel) as z:
        for name, path in SOURCES.items():
            module = types.ModuleType(name)
            module.__file__ = path
            sys.modules[name] = module
            exec(compile(z.read(path).decode(), path, "exec"), module.__dict__)
            loaded[name] = module
    return loaded


class Clock:
    """time.perf_counter, SCALE times faster."""

    def __init__(self):
        self.start = time.perf_counter()

    def perf_counter(self) -> float:
        return (time.perf_counter() - self.start) * SCALE

    def __getattr__(self, name):
        return getattr(time, name)


def synthetic_server(funcs, options, clock: Clock):
    rng = random.Random(options.jitter_seed)
    slots = asyncio.Semaphore(options.max_num_seqs)
    mean_prompt = options.mean_prompt
    seen = {"n": 0}

    async def request(request_func_input, pbar=None):
        output = funcs.RequestFuncOutput()
        output.prompt_len = request_func_input.prompt_len
        seen["n"] += 1
        index = seen["n"] - 1  # 0: the bench's initial test request
        st = clock.perf_counter()
        if options.fail_every and index and index % options.fail_every == 0:
            await asyncio.sleep(0.001)
            output.success = False
            output.error = "Bad Request"
            return output
        async with slots:
            waited = clock.perf_counter() - st
            prefill = options.ttft_ms / 1000 * request_func_input.prompt_len / mean_prompt * rng.uniform(0.9, 1.1)
            n = request_func_input.output_len
            itl = [options.tpot_ms / 1000 * rng.uniform(0.9, 1.1) for _ in range(max(0, n - 1))]
            busy = prefill + sum(itl)
            await asyncio.sleep(busy / SCALE)
        output.ttft = waited + prefill
        output.itl = itl
        output.latency = clock.perf_counter() - st
        output.output_tokens = n
        output.generated_text = " ".join("x" for _ in range(n))
        output.success = True
        return output

    return request


def main(argv: list[str]) -> None:
    if "--" not in argv:
        raise SystemExit(__doc__)
    ours, bench = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    parser = argparse.ArgumentParser()
    parser.add_argument("wheel", type=Path)
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--ttft-ms", type=float, required=True)
    parser.add_argument("--tpot-ms", type=float, required=True)
    parser.add_argument("--max-num-seqs", type=int, required=True)
    parser.add_argument("--fail-every", type=int, default=0)
    parser.add_argument("--jitter-seed", type=int, default=1)
    options = parser.parse_args(ours)
    modules = _load(options.wheel)
    serve = modules["vllm.benchmarks.serve"]
    funcs = modules["vllm.benchmarks.endpoint_request_func"]
    bench_parser = argparse.ArgumentParser()
    serve.add_cli_args(bench_parser)
    args = bench_parser.parse_args(bench)
    options.mean_prompt = args.random_input_len
    clock = Clock()
    serve.time = clock
    request = synthetic_server(funcs, options, clock)
    for name in list(funcs.ASYNC_REQUEST_FUNCS):
        funcs.ASYNC_REQUEST_FUNCS[name] = request
    args.disable_tqdm = True
    options.outdir.mkdir(parents=True, exist_ok=True)
    here = Path.cwd()
    os.chdir(options.outdir)
    try:
        serve.main(args)
    finally:
        os.chdir(here)


if __name__ == "__main__":
    main(sys.argv[1:])
