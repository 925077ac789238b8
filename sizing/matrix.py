"""The quick decision matrix of our LLM inference buying guide (seeds/003) as
data (sizing/data/decision_matrix.json), and the class a workload falls in:
`recommend` and `compare` name it with the guide's watch points."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

from .arithmetic import Workload

MATRIX_FILE = Path(__file__).resolve().parent / "data" / "decision_matrix.json"

USES = ("chat", "rag", "batch", "local", "regulated")
# decided (the guide names classes, not bounds): total parameters of each size class.
SMALL_MAX_PARAMS = 20 * 10**9
MID_MAX_PARAMS = 50 * 10**9
# decided: a long-context (RAG) workload sends prompts of this many tokens or more on
# average, or asks for this long a context without saying how long its prompts are.
LONG_PROMPT_TOKENS = 8192
LONG_CONTEXT_TOKENS = 32768


@dataclass(frozen=True)
class WorkloadClass:
    """One row of the guide's quick decision matrix."""

    code: str
    workload: str
    guide_gpus: str
    start_with: tuple[str, ...]
    why: str
    watch_point: str
    rule: str


@lru_cache(maxsize=1)
def decision_matrix() -> dict[str, WorkloadClass]:
    """The guide's matrix, in its order, by code (sizing/data/decision_matrix.json)."""
    rows = json.loads(MATRIX_FILE.read_text())["classes"]
    return {
        r["code"]: WorkloadClass(
            code=r["code"],
            workload=r["workload"],
            guide_gpus=r["guide_gpus"],
            start_with=tuple(r["start_with"]),
            why=r["why"],
            watch_point=r["watch_point"],
            rule=r["rule"],
        )
        for r in rows
    }


@dataclass(frozen=True)
class Placement:
    """The class a workload falls in, why, and the other classes whose watch points apply."""

    workload_class: WorkloadClass
    because: str
    also: tuple[WorkloadClass, ...] = ()


def _size_class(workload: Workload) -> tuple[WorkloadClass, str]:
    matrix = decision_matrix()
    params = workload.arch.total_params
    billions = f"{Decimal(params) / 10**9:.1f}B parameters"
    if params <= SMALL_MAX_PARAMS:
        return matrix["chat_7b_13b"], f"{billions} (up to {SMALL_MAX_PARAMS // 10**9}B)"
    if params <= MID_MAX_PARAMS:
        return matrix[
            "inference_30b_34b"
        ], f"{billions} (above {SMALL_MAX_PARAMS // 10**9}B, up to {MID_MAX_PARAMS // 10**9}B)"
    return matrix["inference_70b"], f"{billions} (above {MID_MAX_PARAMS // 10**9}B)"


def workload_class(*, workload: Workload, use: str | None = None, latency_target: bool = False) -> Placement:
    """The guide's class for a workload: what the customer says it is for
    (`use`) first, then long prompts, then a latency target, then the model's
    size. The size class's watch point applies besides whichever is chosen."""
    matrix = decision_matrix()
    size, size_because = _size_class(workload)
    prompt = workload.input_tokens
    long_prompts = (prompt is not None and prompt >= LONG_PROMPT_TOKENS) or (
        prompt is None and workload.context >= LONG_CONTEXT_TOKENS
    )
    chosen: WorkloadClass
    if use in ("local", "regulated", "batch"):
        chosen, because = matrix[use], f"use: {use}"
    elif use == "rag":
        chosen, because = matrix["long_context_rag"], "use: rag"
    elif long_prompts:
        chosen = matrix["long_context_rag"]
        because = (
            f"prompts of {prompt:,} tokens on average ({LONG_PROMPT_TOKENS:,} or more)"
            if prompt is not None
            else f"a context of {workload.context:,} tokens ({LONG_CONTEXT_TOKENS:,} or more)"
        )
    elif latency_target:
        chosen, because = matrix["latency_sensitive_chat"], "a p95 latency target"
    else:
        chosen, because = size, size_because
    also = (size,) if chosen.code != size.code else ()
    return Placement(workload_class=chosen, because=because, also=also)


def placement_payload(placement: Placement) -> dict[str, Any]:
    k = placement.workload_class
    return {
        "code": k.code,
        "workload": k.workload,
        "guide_gpus": k.guide_gpus,
        "start_with": list(k.start_with),
        "why": k.why,
        "watch_point": k.watch_point,
        "because": placement.because,
        "also": [{"code": a.code, "workload": a.workload, "watch_point": a.watch_point} for a in placement.also],
    }
