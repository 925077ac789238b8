"""DATABASE_POOL=true runs on Django's own connection pool (psycopg_pool): the
settings name it, and queries in a fresh process are served by connections the
pool lends and takes back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json
import django
django.setup()
from django.db import connection
for _ in range(3):  # three requests' worth: each takes a connection and gives it back
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    connection.close()
stats = connection.pool.get_stats()
print(json.dumps({"options": connection.settings_dict["OPTIONS"].get("pool"),
                  "max_age": connection.settings_dict["CONN_MAX_AGE"],
                  "engine": connection.settings_dict["ENGINE"],
                  "requests": stats.get("requests_num", 0), "opened": stats.get("connections_num", 0)}))
connection.close_pool()
"""


@pytest.mark.django_db
def test_database_pool_serves_queries_from_djangos_pool():
    db = connection.settings_dict  # the test database, which exists
    url = f"postgres://{db['USER']}{':' + db['PASSWORD'] if db['PASSWORD'] else ''}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DATABASE_POOL": "true",
        "DATABASE_POOL_MIN_SIZE": "1",
        "DATABASE_POOL_MAX_SIZE": "3",
        "DJANGO_SETTINGS_MODULE": "config.settings_test",
    }
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["engine"] == "django.db.backends.postgresql"
    assert seen["options"] == {"min_size": 1, "max_size": 3, "timeout": 10.0}
    assert seen["max_age"] == 0
    assert seen["requests"] >= 3  # every query's connection came from the pool
    assert 1 <= seen["opened"] <= 3
