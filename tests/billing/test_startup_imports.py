"""A process that serves the API does not load the Ethereum node's libraries.

web3 and eth-abi cost about 50 MB of memory and most of a second of CPU per
process. Every process registers the chain watchers at start-up (the readiness
checks), but only the process that scans the Ethereum chain talks to its node.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.keys import watch_only

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import django
django.setup()
import config.urls
from django.urls import resolve
from billing.chains.config import destination_derive, enabled_currencies
from billing.chains.watchers import watcher_for

resolve("/api/v1/orders")
watcher = watcher_for(currency="ETH")
found = {
    "enabled": enabled_currencies(),
    "watched": watcher.watched(),
    "address": destination_derive(currency="USDT", index=3).address,
    "before": sorted(m for m in ("web3", "eth_abi", "eth_utils") if m in sys.modules),
}
with watcher.connect() as rpc:
    found["after"] = sorted(m for m in ("web3", "eth_abi", "eth_utils") if m in sys.modules)
print(json.dumps(found))
"""


def test_web3_loads_only_when_the_node_is_first_spoken_to():
    env = {
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DEBUG": "1",
        "ETH_XPUB": watch_only().eth_xpub,
        "ETH_RPC_URL": "http://127.0.0.1:9",  # never called: connecting makes no request
    }
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert "ETH" in found["enabled"] and found["watched"] is True
    assert found["address"].startswith("0x") and len(found["address"]) == 42
    assert found["before"] == []
    assert found["after"] == ["eth_abi", "eth_utils", "web3"]
