"""gunicorn settings for production (systemd/gpurenthub-web.service)."""

import multiprocessing

bind = "127.0.0.1:8000"
workers = max(2, multiprocessing.cpu_count())
threads = 4
worker_class = "gthread"
timeout = 30
graceful_timeout = 30
max_requests = 2000
max_requests_jitter = 200
accesslog = "-"
errorlog = "-"
forwarded_allow_ips = "127.0.0.1"
