"""The production settings with one URL more: /bench/bare, a bare Django REST
framework view serving a static 15-item list, the yardstick bench/load.py
measures every endpoint against (same server, same settings, same process)."""

from config.settings import *  # noqa: F403

ROOT_URLCONF = "bench_urls"
