"""Backups that restore: deploy/backup/'s scripts as written, against a
throwaway PostgreSQL with continuous archiving (tests/deploy/pgcluster.py) and
a litecoind regtest node the LTC watcher follows.

A base backup is taken (twice, keeping one: the older one and the WAL only it
needed are removed), orders and payments are written (tests/deploy/
backup_scenario.py `before`), a named restore point is made, more orders and
payments are written (`after`), and the database is restored into a new data
directory to that point. On the restored server: it holds exactly what it held
at the point; invoice numbers run without a gap up to the counter; each
derivation counter is past every issued index; the credit ledger adds up to
each balance; the watcher resumes from the restored cursor, records each
transfer of the lost stretch to a known destination once, credits nothing
twice, and a second pass finds nothing; after deploy/backup/after-restore.sh a
new invoice gets neither a lost invoice's address nor its number.

Everything runs under a temporary folder and is stopped and removed at the
end, also when the test fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.litecoind import regtest_node_start, watch_only_account_generate
from tests.deploy.pgcluster import Cluster, give_to_server_user, remove_tree

pytestmark = [pytest.mark.slow, pytest.mark.chain]

ROOT = Path(__file__).resolve().parents[2]
BACKUP = ROOT / "deploy" / "backup"
STEP_TIMEOUT = 120


class Bench:
    """The folder, servers and node of one run; `close()` ends them all."""

    def __init__(self) -> None:
        self.root = give_to_server_user(Path(tempfile.mkdtemp(prefix="grh-backup-")))
        os.chmod(self.root, 0o755)
        self.backups = self.root / "backups"
        self.backups.mkdir()
        (self.backups / "wal").mkdir()
        give_to_server_user(self.backups / "wal")
        self.state = self.root / "state.json"
        self.clusters: list[Cluster] = []
        self.node = None

    def close(self) -> None:
        for cluster in self.clusters:
            cluster.stop(mode="immediate")
        if self.node is not None:
            self.node.stop()
        remove_tree(self.root)

    def script(self, name: str, *args: str, env: dict[str, str]) -> str:
        done = subprocess.run(
            [str(BACKUP / name), *args],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
        )
        assert done.returncode == 0, f"{name} {args}: {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def django(self, *command: str, database_url: str, chain: dict[str, str]) -> dict:
        """A process of the project against `database_url`: `manage.py ...` or a scenario step."""
        env = {key: value for key, value in os.environ.items() if key != "PYTEST_XDIST_WORKER"}
        env.update(chain, DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="config.settings_test")
        done = subprocess.run(
            [sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT
        )
        assert done.returncode == 0, f"{command}: {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
        return json.loads(self.state.read_text()) if self.state.exists() else {}

    def step(self, name: str, *, database_url: str, chain: dict[str, str]) -> dict:
        return self.django(
            "-m", "tests.deploy.backup_scenario", name, str(self.state), database_url=database_url, chain=chain
        )


@pytest.fixture
def bench() -> Iterator[Bench]:
    bench = Bench()
    try:
        yield bench
    finally:
        bench.close()


def _wal_files(archive: Path) -> list[str]:
    return sorted(p.name for p in archive.iterdir() if len(p.name) == 24)


def test_restore_to_a_named_point_between_two_writes(bench):
    # --- the primary: continuous archiving with deploy/backup's archive command --------
    archive = bench.backups / "wal"
    primary = Cluster.create(
        bench.root,
        "primary",
        settings={
            "wal_level": "replica",
            "archive_mode": "on",
            "archive_command": f"'{BACKUP / 'wal-archive.sh'} %p %f {archive}'",
            "fsync": "off",  # a throwaway server: no crash to survive
        },
    )
    bench.clusters.append(primary)
    primary.start()
    primary.sql("CREATE DATABASE grh")
    libpq = primary.env()
    backup_env = {**libpq, "BACKUP_ROOT": str(bench.backups), "KEEP_BASE_BACKUPS": "1"}

    node = bench.node = regtest_node_start(mine=101)
    account = watch_only_account_generate(hrp=node.hrp)
    chain = {
        "LTC_XPUB": account.vpub,
        "LTC_NETWORK": "regtest",
        "LTC_RPC_URL": node.url,
        "LTC_WALLET": node.wallet,
        "MANUAL_RATES_USD": "LTC=90",
        "RATE_PROVIDERS": "",
    }
    # What deploy/install.sh runs on a new database.
    for command in (("migrate", "--noinput"), ("seed_catalog",)):
        bench.django("manage.py", *command, "-v0", database_url=primary.url("grh"), chain=chain)

    # --- two base backups, keeping one: the first and the WAL only it needed go --------
    bench.script("base-backup.sh", env=backup_env)
    # The first backup's own start, from its label: the archive may not hold every file yet when the
    # script returns (archive_command runs apart), so its earliest file is not that start.
    [first] = list((bench.backups / "base").iterdir())
    first_wal = (first / "backup_label").read_text().split("(file ")[1].split(")")[0]
    # Something written and the segment switched, so the second backup starts in a later segment than
    # the first: with nothing written between them both may start in the same one (nothing to prune).
    primary.sql("CREATE TABLE wal_gap (x int); DROP TABLE wal_gap;")
    primary.sql("SELECT pg_switch_wal()")
    bench.script("base-backup.sh", env=backup_env)
    [kept] = list((bench.backups / "base").iterdir())
    label = (kept / "backup_label").read_text()
    start_wal = label.split("(file ")[1].split(")")[0]
    assert first_wal < start_wal and _wal_files(archive)[0] == start_wal

    # --- writes, a restore point, more writes ----------------------------------------
    state = bench.step("before", database_url=primary.url("grh"), chain=chain)
    bench.script("restore-point.sh", "before-order-c", env=libpq)
    state = bench.step("after", database_url=primary.url("grh"), chain=chain)
    before, after = state["facts_before"], state["facts_after"]
    a, b, c = state["a"], state["b"], state["c"]
    assert str(c["order"]) in after["orders"] and str(c["order"]) not in before["orders"]
    assert after["invoices"][str(b["invoice"])] == "settled" and after["invoices"][str(c["invoice"])] == "settled"
    # The stretch after the point is archived too: the targets, not the archive's end, must stop there.
    last = primary.sql("SELECT pg_walfile_name(pg_switch_wal())")
    primary.wait_archived(last)
    primary.stop()

    # --- restore to a moment: the database's clock between B and C ----------------------
    by_time = Cluster.attach(bench.root / "restored-by-time", bench.root)
    bench.script("restore.sh", "--pgdata", str(by_time.datadir), "--target-time", state["time_before"], env=backup_env)
    bench.clusters.append(by_time)
    # Not archiving: its new timeline stays out of the archive the restore below reads.
    by_time.start(settings={"archive_mode": "off"})
    by_time.wait_writable()
    numbers = by_time.sql("SELECT string_agg(number, ' ' ORDER BY number) FROM billing_invoice", database="grh")
    assert numbers.split() == [a["number"], b["number"]]
    assert by_time.sql("SELECT height FROM billing_chainstate", database="grh") == str(state["cursor_before"])
    by_time.stop()

    # --- restore into a new data directory, to the named point ------------------------
    restored_dir = bench.root / "restored"
    out = bench.script("restore.sh", "--pgdata", str(restored_dir), "--target-name", "before-order-c", env=backup_env)
    assert str(kept) in out
    restored = Cluster.attach(restored_dir, bench.root)
    bench.clusters.append(restored)
    restored.start()
    restored.wait_writable()
    assert 'recovery stopping at restore point "before-order-c"' in restored.log.read_text()

    state = bench.step("check", database_url=restored.url("grh"), chain=chain)
    here = state["facts_restored"]
    # Exactly what the database held at the point: A settled with its surplus credited, B open.
    assert here == before
    assert here["invoices"][str(a["invoice"])] == "settled" and here["invoices"][str(b["invoice"])] == "new"
    assert state["cursor_restored"] == state["cursor_before"]
    _assert_consistent(here)

    # The watcher resumes from the restored cursor: every block since, each transfer once.
    first, second = state["scans"]
    assert first["blocks"] == state["tip_after"] - state["cursor_before"] and first["height"] == state["tip_after"]
    assert (second["blocks"], second["recorded"], second["unconfirmed"]) == (0, 0, 0)
    rescanned = state["facts_rescanned"]
    _assert_consistent(rescanned)
    txids = [payment[0] for payment in rescanned["payments"]]
    assert sorted(txids) == sorted([a["txid"], a["late_txid"], b["txid"]])  # C's invoice is lost: not matched
    assert rescanned["invoices"][str(b["invoice"])] == "settled"
    # The same books as before the restore for what the restored database knows, credit included.
    assert rescanned["payments"] == [p for p in after["payments"] if p[0] != c["txid"]]
    assert rescanned["credits"] == after["credits"]
    [ledger] = rescanned["ledger"].values()
    assert ledger["balance"] == "1.80"  # A's surplus and its late transfer, $0.90 each, once each

    # --- after-restore.sh, then a new invoice: a fresh address and number -------------
    out = bench.script(
        "after-restore.sh",
        "--destinations",
        "1000",
        "--invoice-numbers",
        "5",
        env={"DATABASE_URL": restored.url("grh")},
    )
    assert "destinations" in out and "invoice numbers" in out
    state = bench.step("issue", database_url=restored.url("grh"), chain=chain)
    d = state["d"]
    [keyset] = here["next_index"]
    assert d["index"] == here["next_index"][keyset] + 1000 and d["address"] != c["address"]
    [series] = here["counters"]
    assert d["number"] == f"{series}-{here['counters'][series] + 6:06d}" and d["number"] != c["number"]
    issued = state["facts_issued"]
    assert all(issued["next_index"][k] > top for k, top in issued["issued_top_index"].items())


def _assert_consistent(facts: dict) -> None:
    """The invariants a restored database must hold whatever the point."""
    for series, numbers in facts["numbers"].items():
        assert numbers == list(range(1, facts["counters"][series] + 1)), series
    assert facts["issued_top_index"]
    for keyset, top in facts["issued_top_index"].items():
        assert facts["next_index"][keyset] > top, keyset
    for account, ledger in facts["ledger"].items():
        assert ledger["balance"] == ledger["sum"] == ledger["last_balance_after"], account
    assert facts["duplicate_payments"] == []
    credited = [entry[1] for entry in facts["credits"] if entry[1]]
    assert len(credited) == len(set(credited))
