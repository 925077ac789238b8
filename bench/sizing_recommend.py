"""Server time of POST /api/v1/sizing/recommend over the whole catalog.

    DATABASE_URL=postgres://... .venv/bin/python bench/sizing_recommend.py [--runs 300] [--new]

Sets Django up against DATABASE_URL (SQLite under data/ when unset), migrates,
loads the catalog and the architectures when they are missing, then times the
request in process (middleware, validation, queries, arithmetic, pricing,
rendering; no network) and prints the median and p99 wall time for a few
workloads, with the application's own CPU time beside it (the part that does
not depend on what else the machine is running). Workloads use the default
vllm profile unless they name the guide.

A body asked again is answered from what the worker kept for it (per catalog
version); `--new` makes each run a workload not asked before (the same one
with prompts of 1,000 tokens and outputs one token longer than the run
before, from 500), which takes the whole sizing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-used-anywhere-else-0123456789")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost")
os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
os.environ.setdefault("SITE_URL", "http://127.0.0.1:8000")
os.environ.setdefault("LOG_LEVEL", "WARNING")

WORKLOADS = {
    "70B fp8, 8k, whole catalog": {"model": "ref-70b", "precision": "fp8", "context": 8192, "concurrency": 1},
    "405B fp8, 8k, whole catalog": {"model": "ref-405b", "precision": "fp8", "context": 8192, "concurrency": 1},
    "7B int4, 32x4k (everything fits)": {"model": "ref-7b", "precision": "int4", "context": 4096, "concurrency": 32},
    "DeepSeek-V3 config.json, fp8": None,  # filled from the seeded shape below
    "70B bf16, region PDX-1": {"model": "ref-70b", "precision": "bf16", "context": 8192, "region": "PDX-1"},
    "Llama 3.1 70B awq, 16x16k": {"model": "llama-3.1-70b", "precision": "awq", "context": 16384, "concurrency": 16},
    "gpt-oss-120b mxfp4, 8x32k": {"model": "gpt-oss-120b", "precision": "mxfp4", "context": 32768, "concurrency": 8},
    "70B fp8, 8k, guide profile": {"model": "ref-70b", "precision": "fp8", "context": 8192, "profile": "guide"},
}


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--new", action="store_true", help="a workload not asked before in every run")
    args = parser.parse_args()

    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client

    from catalog.models import GpuModel
    from catalog.seed import catalog_seed
    from sizing.seed import architectures_seed

    call_command("migrate", verbosity=0)
    if not GpuModel.objects.exists():
        catalog_seed()
    architectures_seed()

    deepseek = {
        "architecture": {
            "model_type": "deepseek_v3",
            "num_hidden_layers": 61,
            "hidden_size": 7168,
            "intermediate_size": 18432,
            "moe_intermediate_size": 2048,
            "num_attention_heads": 128,
            "num_key_value_heads": 128,
            "vocab_size": 129280,
            "max_position_embeddings": 163840,
            "kv_lora_rank": 512,
            "q_lora_rank": 1536,
            "qk_rope_head_dim": 64,
            "qk_nope_head_dim": 128,
            "v_head_dim": 128,
            "n_routed_experts": 256,
            "n_shared_experts": 1,
            "num_experts_per_tok": 8,
            "first_k_dense_replace": 3,
        },
        "precision": "fp8",
        "context": 32768,
        "concurrency": 4,
    }
    WORKLOADS["DeepSeek-V3 config.json, fp8"] = deepseek

    client = Client()
    print(
        f"POST /api/v1/sizing/recommend, {args.runs} runs each after {args.warmup} warm-up, "
        f"{GpuModel.objects.filter(is_active=True).count()} cards, database {django.db.connection.vendor}"
        + (", a new workload each run" if args.new else "")
    )
    worst_p99 = 0.0
    for label, body in WORKLOADS.items():
        bodies = [body] * (args.warmup + args.runs)
        if args.new:
            bodies = [body | {"input_tokens": 1000, "output_tokens": 500 + k} for k in range(args.warmup + args.runs)]
        for warm in bodies[: args.warmup]:
            client.post("/api/v1/sizing/recommend", warm, content_type="application/json")
        samples, cpu = [], []
        candidates = 0
        for run in bodies[args.warmup :]:
            start, start_cpu = time.perf_counter(), time.process_time()
            resp = client.post("/api/v1/sizing/recommend", run, content_type="application/json")
            samples.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
            if resp.status_code != 200:
                print(f"{label}: HTTP {resp.status_code} {resp.content[:200]!r}")
                return 1
            candidates = len(resp.json()["candidates"])
        p99 = percentile(samples, 99)
        worst_p99 = max(worst_p99, p99)
        print(
            f"  {label:36} median {statistics.median(samples):6.2f} ms   p99 {p99:6.2f} ms   "
            f"(app CPU median {statistics.median(cpu):5.2f} ms; {candidates} candidates)"
        )
    print(f"worst p99 {worst_p99:.2f} ms; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
