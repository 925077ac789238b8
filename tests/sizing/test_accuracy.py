"""The speed model against published benchmarks: every row held to its band is
inside it, and docs/sizing.md carries exactly the table the command writes."""

import json
from pathlib import Path

from django.core.management import call_command

from sizing.services import (
    ACCURACY_END,
    ACCURACY_START,
    BENCHMARKS_FILE,
    accuracy_document,
    accuracy_table,
    sizing_accuracy,
)

DOC = Path(__file__).resolve().parent.parent.parent / "docs" / "sizing.md"


def test_every_published_row_is_inside_its_band():
    rows = sizing_accuracy()
    held = [r for r in rows if not r.separately]
    assert len(held) >= 100
    outside = [
        (r.row["model"], r.row["gpu"], r.row["input_tokens"], r.row["output_tokens"], r.ratio)
        for r in held
        if not r.inside
    ]
    assert not outside
    # Rows listed apart say why and still carry their prediction.
    for r in rows:
        if r.separately:
            assert len(r.separately) > 40
            assert r.predicted is not None
    # Sources of both kinds, every row with its page.
    assert {r.row["source"] for r in held} == {"trtllm", "vllm"}
    assert all(r.row["url"].startswith("https://") for r in rows)


def test_every_row_listed_apart_is_listed_by_a_rule_none_by_hand():
    # The data file sets no row apart itself: each one listed apart is by a rule computed from
    # memory (attention data parallelism) or from the config (chunked attention past the chunk).
    data = json.loads(BENCHMARKS_FILE.read_text())
    assert not [r for r in data["rows"] if "separately" in r]
    apart = [r for r in sizing_accuracy() if r.separately and r.ratio is not None]
    assert apart
    assert all("attention data parallelism" in r.separately or "[Chunked Attention]" in r.separately for r in apart)


def test_no_prediction_implies_more_than_the_dense_peak():
    for r in sizing_accuracy():
        if r.predicted is not None:
            assert 0 < r.peak_share < 1


def test_the_docs_table_is_the_commands(tmp_path):
    text = DOC.read_text()
    start, end = text.index(ACCURACY_START), text.index(ACCURACY_END)
    assert text == accuracy_document(text, accuracy_table(sizing_accuracy()))
    copy = tmp_path / "sizing.md"
    copy.write_text(text[: start + len(ACCURACY_START)] + "\nhand-edited\n" + text[end:])
    call_command("sizing_accuracy", write=str(copy))
    assert copy.read_text() == text


def test_attention_dp_rule_is_decided_by_memory_alone():
    # TensorRT-LLM's MoE rows run with attention data parallelism: where that layout
    # holds fewer requests than the vLLM line by more than the band's 1.10x, the row is
    # listed apart, and the reason gives both counts. It is the layout, not the prediction.
    rows = sizing_accuracy()
    by_rule = [r for r in rows if "attention data parallelism" in r.separately]
    assert {(r.row["model"], r.row["gpu"]) for r in by_rule} >= {
        ("llama-4-maverick", "h100-sxm"),
        ("llama-4-scout", "h100-sxm"),
    }
    assert all(r.row["source"] == "trtllm" and r.row["gpu_count"] > 1 for r in by_rule)
    # Rows the rule lists apart include ones inside the band: it does not read the ratio.
    assert any(r.within for r in by_rule)
    # Qwen3-235B-A22B's layout holds more than the vLLM line: its rows stay held.
    qwen = [r for r in rows if r.row["model"] == "qwen3-235b-a22b"]
    assert qwen and not any(r.separately for r in qwen)
    # No row on one GPU (the two layouts are the same there).
    assert not [r for r in by_rule if r.row["gpu_count"] == 1]


def test_attention_dp_keeps_all_but_the_routed_experts_whole():
    from decimal import Decimal

    from sizing.arithmetic import Workload
    from sizing.engine import PROFILE_VLLM, budget_compute, kv_tokens_capacity
    from sizing.hf_config import architecture_from_hf_config
    from sizing.services import BENCH_UTILIZATION, _catalog_cards, attention_dp_kv_tokens

    from .conftest import hf_config

    arch = architecture_from_hf_config(hf_config("llama-4-maverick"), slug="llama-4-maverick")
    w = Workload(
        arch=arch,
        precision="fp8",
        kv_precision="fp8",
        engine_version="0.9.2",
        context=2176,
        concurrency=1024,
        profile=PROFILE_VLLM,
        max_gpu_memory_utilization=Decimal("0.90"),
        input_tokens=128,
        output_tokens=2048,
    )
    cards = _catalog_cards()
    for gpu, low, high in (("h100-sxm", 0.2, 0.5), ("h200-sxm", 0.8, 1.0)):
        b = budget_compute(workload=w, card=cards[gpu], gpu_count=8, concurrency=1024)
        vllm = kv_tokens_capacity(
            arch=arch, kv_precision="fp8", gpu_count=8, kv_bytes=b.kv_available(BENCH_UTILIZATION)
        )
        # Maverick's attention, 24 dense MLPs, shared experts and embedding whole on each of
        # eight H100s leave TensorRT-LLM about a third of the vLLM line's KV room.
        assert low < attention_dp_kv_tokens(workload=w, budget=b, gpu_count=8) / vllm < high


def test_llama_4_rows_past_the_chunk_are_listed_apart_by_what_each_engine_reads():
    # TensorRT-LLM's generation is not held to Llama 4's chunk; vLLM's is. On the rows
    # whose decode positions pass the 8,192-token chunk (20000/2000) TensorRT-LLM reads
    # more than 1.10x the KV vLLM reads, so those rows are listed apart, whatever their
    # prediction; rows inside the chunk are untouched by the rule.
    rows = sizing_accuracy()
    by_rule = [r for r in rows if "[Chunked Attention]" in r.separately]
    assert {(r.row["model"], r.row["gpu"], r.row["gpu_count"]) for r in by_rule} == {
        ("llama-4-scout", "b200", 1),
        ("llama-4-scout", "h200-sxm", 4),
        ("llama-4-maverick", "b200", 8),
    }
    assert all((r.row["input_tokens"], r.row["output_tokens"]) == (20000, 2000) for r in by_rule)
    assert all("reads 2.4x the KV cache vLLM reads" in r.separately for r in by_rule)
    assert any(r.within for r in by_rule)  # Maverick's on 8 x B200: the rule does not read the ratio
    llama4 = [r for r in rows if r.row["model"].startswith("llama-4")]
    inside_the_chunk = [r for r in llama4 if r.row["input_tokens"] + r.row["output_tokens"] <= 8192]
    assert inside_the_chunk and not [r for r in inside_the_chunk if "[Chunked Attention]" in r.separately]
    # A dense model's long rows are held as ever.
    dense = [r for r in rows if r.row["model"] == "llama-3.3-70b" and r.row["input_tokens"] == 20000]
    assert dense and not any(r.separately for r in dense)
