"""The application behind nginx in tests/deploy/test_nginx.py: it answers every
request with what reached it, so a test knows gunicorn passed the request on
(and did not answer it with a page of its own)."""

import json


def app(environ, start_response):
    seen = {
        "path": environ["PATH_INFO"],
        "query_bytes": len(environ.get("QUERY_STRING", "")),
        "header_count": sum(1 for key in environ if key.startswith("HTTP_")),
        "forwarded_proto": environ.get("HTTP_X_FORWARDED_PROTO"),
        "forwarded_ssl": environ.get("HTTP_X_FORWARDED_SSL"),
        "content_type": environ.get("CONTENT_TYPE"),
        "longest_header": max((len(v) for k, v in environ.items() if k.startswith("HTTP_")), default=0),
    }
    body = json.dumps(seen).encode()
    start_response(
        "200 OK",
        [("Content-Type", "application/json"), ("Content-Length", str(len(body))), ("X-Upstream", "reached")],
    )
    return [body]
