"""The production gunicorn settings (deploy/gunicorn.conf.py) as gunicorn reads them."""

import gc
from pathlib import Path

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


def test_settings_are_read_as_written():
    cfg = _config()
    assert cfg.worker_class_str == "gthread"
    assert cfg.threads == 4
    assert cfg.worker_connections == 8
    assert cfg.keepalive == 0  # no client holds a worker's places between its requests
    assert cfg.preload_app is True
    assert cfg.max_requests == 100000
    # Above nginx's limits (deploy/nginx/gpurenthub.conf; tests/deploy/test_nginx.py finds its edges).
    assert (cfg.limit_request_line, cfg.limit_request_field_size, cfg.limit_request_fields) == (8190, 16384, 32768)


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
