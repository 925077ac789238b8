"""What web processes count as they answer: requests, orders placed and refused.

prometheus_client keeps these in memory, one copy per process, unless
PROMETHEUS_MULTIPROC_DIR is set in the environment before it is imported: then
every process writes its values to files in that folder and a scrape adds them
up (prometheus_client.values.get_value_class picks MultiProcessValue;
prometheus_client.multiprocess.MultiProcessCollector reads the files back;
https://prometheus.github.io/client_python/multiprocess/). gunicorn runs several
processes, so production sets it (deploy/systemd/gpurenthub-web.service), and the
folder is emptied before gunicorn starts, as that page asks.

Everything else on /metrics is read from the database at scrape time
(observability.collector), so it is right however many processes wrote it.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

REQUESTS = Counter(
    "gpurenthub_http_requests",
    "HTTP requests answered, by route (the URL pattern), method and status code.",
    ["route", "method", "status"],
    registry=None,
)
LATENCY = Histogram(
    "gpurenthub_http_request_duration_seconds",
    "Time to answer an HTTP request, by route and method.",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=None,
)
ORDERS_PLACED = Counter(
    "gpurenthub_orders_placed",
    "Orders placed (POST /api/v1/orders answered 201).",
    registry=None,
)
ORDERS_REFUSED = Counter(
    "gpurenthub_orders_refused",
    "Orders refused, by the error code of the answer (insufficient_stock, does_not_fit, ...).",
    ["code"],
    registry=None,
)

# Registered with a scrape's registry when there is one process (make run, tests).
# In multiprocess mode the scrape reads the files instead: registering these too
# would export them twice (the page above).
PROCESS_METRICS = (REQUESTS, LATENCY, ORDERS_PLACED, ORDERS_REFUSED)
