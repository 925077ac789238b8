"""deploy/prometheus/: the alerting rules pass `promtool check rules` and their unit
tests (`promtool test rules`), the scrape job is valid, and every metric a rule
reads is one /metrics exports.

promtool comes from Debian's prometheus package (tests/observability/ensure-promtool.sh,
run by `make test`); without it these tests are skipped."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
PROMTOOL = shutil.which("promtool")

needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (tests/observability/ensure-promtool.sh installs it)"
)


def promtool(*args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@needs_promtool
def test_the_rules_are_valid():
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 13 rules found" in result.stdout


@needs_promtool
def test_the_rules_fire_as_their_unit_tests_say():
    result = promtool("test", "rules", "alerts_test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@needs_promtool
def test_a_broken_threshold_fails_the_unit_tests(tmp_path):
    """The unit tests can fail: a rule that waits ten times longer is caught."""
    shutil.copy(PROMETHEUS / "alerts_test.yml", tmp_path)
    rules = (PROMETHEUS / "alerts.yml").read_text()
    assert rules.count("gpurenthub_provisioning_oldest_wait_seconds) > 90\n") == 1
    (tmp_path / "alerts.yml").write_text(rules.replace("oldest_wait_seconds) > 90\n", "oldest_wait_seconds) > 900\n"))
    result = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert result.returncode != 0
    assert "ProvisioningLate" in result.stdout + result.stderr


@needs_promtool
def test_the_scrape_job_is_valid():
    result = promtool("check", "config", "--syntax-only", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def exported_names() -> set[str]:
    """Every metric name observability/ exports, as a scrape shows it (counters with _total)."""
    names = set()
    for path in (ROOT / "observability").glob("*.py"):
        text = path.read_text()
        names.update(re.findall(r'(?:Counter|CounterMetricFamily)\(\s*"(gpurenthub_\w+)"', text))
        names.update(f"{n}_total" for n in re.findall(r'(?:Counter|CounterMetricFamily)\(\s*"(gpurenthub_\w+)"', text))
        names.update(re.findall(r'(?:Gauge|GaugeMetricFamily)\(\s*"(gpurenthub_\w+)"', text))
        for hist in re.findall(r'Histogram\(\s*"(gpurenthub_\w+)"', text):
            names.update({hist, f"{hist}_bucket", f"{hist}_count", f"{hist}_sum"})
    return names


def test_every_metric_a_rule_reads_is_exported():
    exported = exported_names()
    assert "gpurenthub_chain_lag_blocks" in exported and "gpurenthub_http_requests_total" in exported
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    used = set()
    for group in rules["groups"]:
        for rule in group["rules"]:
            used.update(re.findall(r"\bgpurenthub_\w+", rule["expr"]))
    assert used, "no rule reads a gpurenthub_ metric"
    assert used <= exported, used - exported


def test_the_issue_s_alerts_are_all_there():
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    names = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    assert {
        "WatcherBehindNode",
        "WatcherSilent",
        "NodeBehindNetwork",
        "NodeOnWrongChain",
        "RatesStale",
        "StablecoinDepegged",
        "ProvisioningLate",
        "WebhookBacklog",
        "WebhookFailures",
        "HighServerErrorRate",
    } <= names
    tested = yaml.safe_load((PROMETHEUS / "alerts_test.yml").read_text())
    exercised = {
        case["alertname"] for test in tested["tests"] for case in test["alert_rule_test"] if case["exp_alerts"]
    }
    assert exercised == names, names - exercised
