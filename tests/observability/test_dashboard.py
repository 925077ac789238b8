"""deploy/grafana/gpurenthub.json: a dashboard Grafana can import, whose every query
parses as PromQL (promtool), reads metrics /metrics exports, and that shows what
the alerts watch."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "gpurenthub.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
PROMTOOL = shutil.which("promtool")
PANEL_TYPES = {"row", "timeseries", "stat", "table", "gauge", "bargauge"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def queries(board: dict) -> list[str]:
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bgpurenthub_\w+", expr))


def exported() -> set[str]:
    names = set()
    for path in (ROOT / "observability").glob("*.py"):
        text = path.read_text()
        for kind, name in re.findall(
            r'(Counter|CounterMetricFamily|Gauge|GaugeMetricFamily|Histogram)\(\s*"(gpurenthub_\w+)"', text
        ):
            if kind.startswith("Counter"):
                names.add(f"{name}_total")
            elif kind == "Histogram":
                names.update({f"{name}_bucket", f"{name}_count", f"{name}_sum"})
            else:
                names.add(name)
    return names


def test_the_dashboard_is_an_importable_grafana_dashboard():
    board = dashboard()
    assert board["uid"] == "gpurenthub-overview" and board["title"]
    assert isinstance(board["schemaVersion"], int) and board["schemaVersion"] >= 36
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource"]
    assert (
        board["templating"]["list"][0] | {"type": "datasource", "query": "prometheus"} == board["templating"]["list"][0]
    )
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    cells: dict[tuple[int, int], int] = {}
    for panel in board["panels"]:
        assert panel["type"] in PANEL_TYPES, panel["type"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps panel {cells[(x, y)]}"
                cells[(x, y)] = panel["id"]
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            refs = [t["refId"] for t in panel["targets"]]
            assert len(refs) == len(set(refs))


def test_every_query_reads_exported_metrics():
    known = exported()
    for expr in queries(dashboard()):
        assert metric_names(expr) <= known, (expr, metric_names(expr) - known)


def test_it_shows_what_the_alerts_watch_and_what_the_issue_asks():
    shown = set().union(*(metric_names(e) for e in queries(dashboard())))
    rules = yaml.safe_load(ALERTS.read_text())
    watched = set().union(*(metric_names(r["expr"]) for g in rules["groups"] for r in g["rules"]))
    assert watched <= shown, watched - shown
    # Requests by route, status and latency; orders placed and refused; invoices by state; payments per
    # currency; per watcher height, scanned height, lag, last success, lease holder; rate age; webhook
    # deliveries by outcome and backlog; the Celery queue; the oldest paid rental waiting.
    assert {
        "gpurenthub_http_requests_total",
        "gpurenthub_http_request_duration_seconds_bucket",
        "gpurenthub_orders_placed_total",
        "gpurenthub_orders_refused_total",
        "gpurenthub_invoices",
        "gpurenthub_payments_seen_total",
        "gpurenthub_chain_node_height",
        "gpurenthub_chain_scanned_height",
        "gpurenthub_chain_lag_blocks",
        "gpurenthub_chain_last_success_age_seconds",
        "gpurenthub_chain_lease_held",
        "gpurenthub_rate_newest_age_seconds",
        "gpurenthub_webhook_deliveries",
        "gpurenthub_celery_queue_length",
        "gpurenthub_provisioning_oldest_wait_seconds",
    } <= shown


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (tests/observability/ensure-promtool.sh)")
def test_every_query_parses(tmp_path):
    """Each query as a recording rule: `promtool check rules` parses its PromQL."""
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [{"record": f"dashboard:q{i}", "expr": e} for i, e in enumerate(queries(dashboard()))],
            }
        ]
    }
    (tmp_path / "queries.yml").write_text(yaml.safe_dump(rules))
    result = subprocess.run(
        [PROMTOOL, "check", "rules", "queries.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries(dashboard()))} rules found" in result.stdout
    (tmp_path / "broken.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "b", "rules": [{"record": "b:q", "expr": "sum by (chain (x)"}]}]})
    )
    broken = subprocess.run([PROMTOOL, "check", "rules", "broken.yml"], cwd=tmp_path, capture_output=True, timeout=60)
    assert broken.returncode != 0
