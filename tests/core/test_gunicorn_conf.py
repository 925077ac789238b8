"""The production gunicorn settings (deploy/gunicorn.conf.py) as gunicorn reads them."""

import gc
import re
from pathlib import Path

import pytest
from gunicorn.config import Config

CONF = Path(__file__).resolve().parents[2] / "deploy" / "gunicorn.conf.py"


def _config() -> Config:
    from gunicorn.app.base import Application

    class _App(Application):
        def init(self, parser, opts, args):
            return None

        def load(self):
            return None

    app = _App.__new__(_App)
    app.cfg = Config()
    app.load_config_from_file(str(CONF))
    return app.cfg


def test_settings_are_read_as_written(monkeypatch):
    monkeypatch.delenv("WEB_THREADS", raising=False)
    cfg = _config()
    assert cfg.worker_class_str == "gthread"
    assert cfg.threads == 2
    assert cfg.worker_connections == 4
    assert cfg.keepalive == 0  # no client holds a worker's places between its requests
    assert cfg.preload_app is True
    assert cfg.max_requests == 100000
    # Above nginx's limits (deploy/nginx/gpurenthub.conf; tests/deploy/test_nginx.py finds its edges).
    assert (cfg.limit_request_line, cfg.limit_request_field_size, cfg.limit_request_fields) == (8190, 16384, 32768)


def test_threads_follow_web_threads(monkeypatch):
    monkeypatch.setenv("WEB_THREADS", "4")
    cfg = _config()
    assert (cfg.threads, cfg.worker_connections) == (4, 8)


@pytest.mark.parametrize("value", ["0", "65", "two", "-1", "2.5"])
def test_a_web_threads_that_is_no_count_stops_the_start(monkeypatch, value):
    monkeypatch.setenv("WEB_THREADS", value)
    with pytest.raises(SystemExit, match=f"WEB_THREADS is '{re.escape(value)}'; expected a whole number from 1 to 64"):
        _config()


def test_the_master_freezes_what_it_loaded_before_each_fork():
    """A worker's full collections must not walk the project the master loaded."""
    cfg = _config()
    assert gc.get_freeze_count() == 0
    tracked = len(gc.get_objects())  # what this process has loaded so far
    try:
        cfg.pre_fork(server=None, worker=None)
        assert gc.get_freeze_count() >= tracked
        assert len(gc.get_objects()) < tracked // 10  # left for a collection to walk
    finally:
        gc.unfreeze()
