"""gunicorn settings for production (systemd/gpurenthub-web.service)."""

import gc
import multiprocessing
import os

# Reached through nginx alone: gunicorn closes a connection on the worker's event
# loop, waiting up to 2 s for the client to close its side, so a client that
# keeps its socket open after its answer would hold up the worker's other
# connections (docs/operations.md, Workers). nginx closes at once.
bind = "127.0.0.1:8000"
workers = max(2, multiprocessing.cpu_count())


def _web_threads() -> int:
    """WEB_THREADS, each worker's threads: 2 unless set, a whole number from 1 to 64.

    Two, not four: on the 2-core machine of make bench, two threads per worker
    placed more orders a second than four in each of five alternating pairs of
    runs, for less of the machine's CPU an order (docs/operations.md, Workers).
    A deployment whose requests wait longer on something else (a database on
    another machine) may want more."""
    raw = os.environ.get("WEB_THREADS", "").strip() or "2"
    value = int(raw) if raw.isdigit() else 0
    if not 1 <= value <= 64:
        raise SystemExit(f"WEB_THREADS is {raw!r}; expected a whole number from 1 to 64 (default 2).")
    return value


threads = _web_threads()
worker_class = "gthread"
# A worker holds at most this many connections; the rest wait in the listen
# backlog for whichever worker frees one first. Without a bound a worker accepts
# whatever is waiting: a client or proxy that keeps a few connections alive could
# put them all on one worker, which (one core under Python's lock) then served
# alone while the others idled; make bench saw half the throughput that way in
# about one run in five. The nginx of deploy/ opens a connection per request.
worker_connections = 2 * threads
# Every answer closes its connection. The nginx of deploy/ opens one per request
# anyway, so behind it this changes nothing. A client that keeps connections
# alive (a load balancer, wrk) no longer holds a worker's places: with
# keep-alive, a worker of 8 places served 4 kept connections over and over
# while a client's other connections waited in the listen backlog, up to 8 s
# (make bench's scale-out trial, 16 connections on one worker). Without it every
# request queues for a place on equal terms. It costs a loopback handshake per
# request: the bare view of make bench answers about an eighth fewer requests
# a second; an order is within the noise.
keepalive = 0
timeout = 30
graceful_timeout = 30
# A worker is replaced after this many requests, a guard against slow leaks (a
# worker's memory is flat: make bench reads it after 10,000 and 50,000). Each replacement
# leaves its share of the traffic to the others for up to a second while the
# master notices and forks: at 2,000 that happened every few seconds under load,
# and cost the bare view of make bench more than half its throughput.
max_requests = 100000
max_requests_jitter = 10000
# Load Django once in the master and fork the workers from it: a worker recycled
# by max_requests serves again in milliseconds instead of importing the project
# anew (seconds, during which its share of the traffic queues), and the workers
# share the loaded code. Nothing opens a connection at import, so none is shared.
# Code changes need a restart (systemctl restart), not a reload.
preload_app = True
# Request limits above nginx's (deploy/nginx/gpurenthub.conf: 8 KiB a request line
# and a header line, 32 KiB of headers), so a request nginx lets through is never
# refused by gunicorn with its own HTML page (400, 414, 431) instead of the API's
# error shape: the longest request line it takes (8190 bytes and the line end), a
# header line nginx passed plus the address its X-Forwarded-For adds, and more
# header lines than nginx takes (about 1,000; 32 KiB of 4-byte lines at the most).
# tests/deploy/test_nginx.py finds nginx's edges and checks gunicorn passes them.
limit_request_line = 8190
limit_request_field_size = 16384
limit_request_fields = 32768
# No access log of gunicorn's own: the application writes one JSON line per request,
# with its request id (observability/middleware.py, logger gpurenthub.access).
accesslog = None
errorlog = "-"
# gunicorn's own lines (starting, a worker booted or timed out) as JSON objects too, like
# the application's (observability/logs.py), to stderr. gunicorn merges this into its
# defaults (gunicorn/glogging.py, CONFIG_DEFAULTS) and, given a dictionary, turns its
# access logger on: it is silenced here, the application's line is the access line.
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "root": {"level": "INFO", "handlers": ["json"]},
    "loggers": {
        "gunicorn.error": {"level": "INFO", "handlers": ["json"], "propagate": False, "qualname": "gunicorn.error"},
        "gunicorn.access": {"level": "CRITICAL", "handlers": [], "propagate": False, "qualname": "gunicorn.access"},
    },
    "handlers": {"json": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
    "formatters": {"json": {"()": "observability.logs.JsonFormatter"}},
}
forwarded_allow_ips = "127.0.0.1"


def pre_fork(server, worker):
    """Move everything the master loaded (Django, the apps, their modules: about
    150,000 objects) out of the garbage collector's sight before forking. A
    worker's full collections then walk only what it made itself. Without this
    each one walked the whole loaded project, about 90 ms with every thread of
    the worker stopped, and its writes to those objects' headers copied the
    pages the worker shared with the master."""
    gc.freeze()


def post_worker_init(worker):
    """Each worker listens for catalog and stock changes (catalog/feed.py), so its
    public reads need not ask the database for the catalog version."""
    from catalog import feed

    feed.start()


def child_exit(server, worker):
    """A worker that ended leaves its multiprocess metric files behind; its live
    gauges are dropped (prometheus_client.multiprocess.mark_process_dead, as
    https://prometheus.github.io/client_python/multiprocess/ asks of gunicorn).
    Counters and histograms stay: a scrape keeps adding them up."""
    import os

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
