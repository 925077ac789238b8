"""The shipped nginx site (deploy/nginx/gpurenthub.conf) in a real nginx, in
front of a real gunicorn with the limits of deploy/gunicorn.conf.py, both on
loopback: `nginx -t` accepts the file, and every request is either passed to
the application or refused by nginx in the API's error shape; gunicorn never
answers one with its own HTML page (400, 414, 431).

Skipped only when nginx is not installed (tests/deploy/ensure-nginx.sh installs
Debian's package)."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.webhooks.receiver import ca_create

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "deploy" / "nginx" / "gpurenthub.conf"
NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed (tests/deploy/ensure-nginx.sh installs it)"),
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen) -> None:
    for _ in range(200):
        if process.poll() is not None:
            raise AssertionError(f"exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


def _gunicorn_limits() -> dict[str, object]:
    """The request limits deploy/gunicorn.conf.py sets, as gunicorn reads them."""
    from gunicorn.app.base import Application
    from gunicorn.config import Config

    class _App(Application):
        def init(self, parser, opts, args):
            return None

        def load(self):
            return None

    app = _App.__new__(_App)
    app.cfg = Config()
    app.load_config_from_file(str(ROOT / "deploy" / "gunicorn.conf.py"))
    return {
        name: app.cfg.settings[name].get()
        for name in ("limit_request_line", "limit_request_fields", "limit_request_field_size", "forwarded_allow_ips")
    }


def site_for_test(text: str, *, http_port: int, https_port: int, upstream_port: int, cert: Path, key: Path) -> str:
    """The site file with loopback ports, a test certificate and the test upstream;
    each replaced line must be found once, so a changed file is noticed here."""
    replacements = {
        "    listen 80;": f"    listen 127.0.0.1:{http_port};",
        "    listen 443 ssl http2;": f"    listen 127.0.0.1:{https_port} ssl http2;",
        "    server 127.0.0.1:8000;": f"    server 127.0.0.1:{upstream_port};",
        "/etc/letsencrypt/live/api.example.com/fullchain.pem": str(cert),
        "/etc/letsencrypt/live/api.example.com/privkey.pem": str(key),
    }
    for old, new in replacements.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


@dataclass
class Stack:
    http_port: int
    https_port: int
    upstream_port: int
    limits: dict[str, object]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nginx")
    tmp.chmod(0o755)
    limits = _gunicorn_limits()
    upstream_port, http_port, https_port = _free_port(), _free_port(), _free_port()
    gunicorn = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "gunicorn"),
            "tests.deploy.upstream_app:app",
            "--bind",
            f"127.0.0.1:{upstream_port}",
            "--worker-class",
            "gthread",
            "--threads",
            "4",
            "--limit-request-line",
            str(limits["limit_request_line"]),
            "--limit-request-fields",
            str(limits["limit_request_fields"]),
            "--limit-request-field_size",
            str(limits["limit_request_field_size"]),
            "--forwarded-allow-ips",
            ",".join(limits["forwarded_allow_ips"]),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    ca_create().server_context("api.example.com", tmp)
    site = site_for_test(
        SITE.read_text(),
        http_port=http_port,
        https_port=https_port,
        upstream_port=upstream_port,
        cert=tmp / "api.example.com.crt",
        key=tmp / "api.example.com.key",
    )
    (tmp / "site.conf").write_text(site)
    for folder in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / folder).mkdir(mode=0o777)
    (tmp / "nginx.conf").write_text(
        f"daemon off;\nworker_processes 1;\npid {tmp}/nginx.pid;\nerror_log {tmp}/error.log info;\n"
        "events { worker_connections 64; }\n"
        "http {\n  access_log off;\n"
        + "".join(
            f"  {folder}_temp_path {tmp}/{folder};\n" for folder in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        + f"  include {tmp}/site.conf;\n}}\n"
    )
    command = [NGINX, "-p", str(tmp), "-c", str(tmp / "nginx.conf"), "-e", str(tmp / "error.log")]
    checked = subprocess.run([*command, "-t"], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    assert "syntax is ok" in checked.stderr and "test is successful" in checked.stderr
    nginx = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(upstream_port, gunicorn)
        _wait_for_port(https_port, nginx)
        yield Stack(http_port, https_port, upstream_port, limits)
    finally:
        for process in (nginx, gunicorn):
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


# =============================================================================
# A raw client: requests exactly as written
# =============================================================================


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def upstream(self) -> bool:
        return self.headers.get("x-upstream") == "reached"

    def json(self) -> dict:
        return json.loads(self.body)


def send(port: int, head: bytes, *, tls: bool = True, source: str | None = None) -> Answer:
    """Send `head` (a request line and headers; Connection: close added) and read the answer,
    from the loopback address `source` when given (127.0.0.2: a client nginx does not know)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=15, source_address=(source, 0) if source else None)
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the test certificate
        sock = context.wrap_socket(sock, server_hostname="api.example.com")
    with sock:
        with contextlib.suppress(OSError):  # nginx may answer and close before it has read everything
            sock.sendall(head + b"Connection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head_part, _, body = data.partition(b"\r\n\r\n")
    lines = head_part.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Answer(int(lines[0].split(" ")[1]), headers, body)


def request(stack: Stack, target: str | bytes = b"/api/v1/catalog/gpus", headers: list[bytes] = (), **kw) -> Answer:
    target = target.encode() if isinstance(target, str) else target
    head = b"GET " + target + b" HTTP/1.1\r\nHost: api.example.com\r\n" + b"".join(h + b"\r\n" for h in headers)
    return send(kw.pop("port", stack.https_port), head, **kw)


def passed_or_refused(answer: Answer, status: int, code: str) -> bool:
    """True when the application got the request, False when nginx refused it with
    `status` and `code` in the error shape; anything else fails the test."""
    if answer.upstream:
        assert answer.status == 200
        return True
    assert answer.status == status, (answer.status, answer.body[:300])
    assert answer.headers["content-type"] == "application/json"
    error = answer.json()["error"]
    assert error["code"] == code and error["message"] and isinstance(error["details"], dict)
    return False


def longest_passed(probe: Callable[[int], bool], low: int, high: int) -> int:
    """The largest n in [low, high) for which probe(n) is True (probe(low) True, probe(high) False)."""
    assert probe(low) and not probe(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if probe(middle) else (low, middle)
    return low


# =============================================================================
# The limits, at their edges
# =============================================================================


def test_a_plain_request_reaches_the_application(stack):
    answer = request(stack)
    assert answer.upstream and answer.json()["path"] == "/api/v1/catalog/gpus"
    assert answer.json()["forwarded_proto"] == "https"


def test_the_uri_limit_is_nginxs_and_gunicorn_takes_every_line_nginx_takes(stack):
    prefix = "/api/v1/catalog/gpus?q="

    def probe(n: int) -> bool:
        return passed_or_refused(request(stack, prefix + "a" * n), 414, "uri_too_long")

    n = longest_passed(probe, 1000, 9000)
    assert len(prefix) + n == 8000  # the documented URI limit
    longest_line = len(f"OPTIONS {prefix}{'a' * n} HTTP/1.1")  # the longest method the API answers
    assert stack.limits["limit_request_line"] >= longest_line
    # gunicorn's default (4094) would have answered 414 itself well below the edge.
    assert request(stack, prefix + "a" * 6000).json()["query_bytes"] == 6002


def test_a_header_line_limit_is_nginxs(stack):
    def probe(n: int) -> bool:
        return passed_or_refused(request(stack, headers=[b"X-Long: " + b"b" * n]), 431, "request_header_too_large")

    n = longest_passed(probe, 100, 9000)
    assert len(b"X-Long: ") + n + 2 == 8192
    assert request(stack, headers=[b"X-Long: " + b"b" * n]).json()["longest_header"] == n


def test_a_long_forwarded_for_still_reaches_the_application(stack):
    """nginx appends the client's address to X-Forwarded-For: the line gunicorn
    gets is longer than any line nginx took."""
    chain = b", ".join(b"203.0.113.%d" % (i % 250) for i in range(620))[:8100]
    answer = request(stack, headers=[b"X-Forwarded-For: " + chain])
    assert answer.upstream
    assert answer.json()["longest_header"] > len(chain)


def test_all_header_lines_together_limit_is_nginxs(stack):
    line = lambda i: b"X-Part-%02d: " % i + b"c" * 1000  # noqa: E731

    def probe(count: int) -> bool:
        return passed_or_refused(
            request(stack, headers=[line(i) for i in range(count)]), 431, "request_header_too_large"
        )

    count = longest_passed(probe, 1, 40)
    assert 28 <= count <= 32  # 32 KiB of buffers, less the request line and Host


def test_many_small_headers_reach_the_application_up_to_nginxs_count(stack):
    """gunicorn's default of 100 header fields would have answered 431 itself."""

    def probe(count: int) -> bool:
        headers = [b"X-N%04d: 1" % i for i in range(count)]
        return passed_or_refused(request(stack, headers=headers), 431, "request_header_too_large")

    count = longest_passed(probe, 50, 3000)
    assert 100 < count + 1 < stack.limits["limit_request_fields"]  # counting Host
    assert request(stack, headers=[b"X-N%04d: 1" % i for i in range(count)]).json()["header_count"] >= count


def test_a_body_over_one_mebibyte_is_refused_in_the_error_shape(stack):
    head = (
        b"POST /api/v1/orders HTTP/1.1\r\nHost: api.example.com\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n" % (1024 * 1024 + 1)
    )
    assert not passed_or_refused(send(stack.https_port, head), 413, "request_too_large")
    small = head.replace(b"%d" % (1024 * 1024 + 1), b"2") + b"\r\n{}"
    assert small  # (a body within the limit is the application's: every API test)


# =============================================================================
# What gunicorn would refuse with its own page: refused or cleaned by nginx
# =============================================================================


@pytest.mark.parametrize(
    "target",
    [b"/api/v1/caf\xc3\xa9", b"/api/v1/x\x7f", b"/api/v1/x?q=\xff"],
    ids=["utf-8", "del", "latin-1"],
)
def test_a_target_outside_printable_ascii_is_refused_in_the_error_shape(stack, target):
    assert not passed_or_refused(request(stack, target), 400, "bad_request")


def test_a_malformed_request_is_refused_in_the_error_shape(stack):
    answer = send(stack.https_port, b"GET /api/v1/x HTTP/1.1 trailing\r\nHost: api.example.com\r\n")
    assert not passed_or_refused(answer, 400, "bad_request")


def test_a_clients_scheme_headers_do_not_reach_gunicorn(stack):
    """gunicorn trusts X-Forwarded-Ssl from nginx as well, and refuses disagreeing ones."""
    answer = request(
        stack, headers=[b"X-Forwarded-Ssl: off", b"X-Forwarded-Protocol: http", b"X-Forwarded-Proto: http"]
    )
    assert answer.upstream
    assert (answer.json()["forwarded_proto"], answer.json()["forwarded_ssl"]) == ("https", None)


def test_a_repeated_content_type_reaches_gunicorn_once(stack):
    answer = request(stack, headers=[b"Content-Type: application/json", b"Content-Type: text/plain"])
    assert answer.upstream
    assert answer.json()["content_type"] == "application/json"


def test_plain_http_redirects_except_the_health_check(stack):
    assert request(stack, "/api/v1/catalog/gpus", port=stack.http_port, tls=False).status == 301
    assert request(stack, "/healthz", port=stack.http_port, tls=False).upstream


# =============================================================================
# HTTP/2 (the site listens with http2): the same limits, the same shape
# =============================================================================

CURL = shutil.which("curl")


def curl_h2(stack: Stack, *args: str, path: str = "/api/v1/catalog/gpus") -> tuple[int, str]:
    """(status, headers and body) of a request over HTTP/2; status 0 when nginx
    reset the stream without an answer."""
    done = subprocess.run(
        [
            CURL,
            "-sk",
            "--http2",
            "-o",
            "-",
            "-D",
            "-",
            "-w",
            "\n%{http_code} %{http_version}",
            "--resolve",
            f"api.example.com:{stack.https_port}:127.0.0.1",
            *args,
            f"https://api.example.com:{stack.https_port}{path}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    out, _, last = done.stdout.rpartition("\n")
    status, version = last.split()
    if done.returncode != 0:  # no answer at all: curl tells why on its exit status
        assert status == "000" and "x-upstream" not in out.lower(), done.stdout[:300]
        return 0, out
    assert version == "2", done.stdout[:300]
    return int(status), out


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
def test_http2_requests_pass_or_are_refused_in_the_error_shape(stack):
    status, out = curl_h2(stack)
    assert status == 200 and "x-upstream: reached" in out.lower()
    # HPACK compresses a header: a field a little over 8 KiB passes; gunicorn takes what nginx lets through.
    for size in (9000, 12000, 13000, 14000, 20000, 40000):
        status, out = curl_h2(stack, "-H", "X-Long: " + "b" * size)
        if "x-upstream: reached" in out.lower():
            assert status == 200 and f'"longest_header": {size}' in out
        elif status:
            assert status == 431 and '"code": "request_header_too_large"' in out, (size, status, out[:300])
        # else: nginx reset the stream ("client sent too large header field"): no answer, gunicorn never saw it
    assert status != 200  # the largest is refused
    # A long path, compressed too, is held to the same URI limit as over HTTP/1.1.
    for size, expected in ((7900, 200), (8100, 414), (12000, 414)):
        status, out = curl_h2(stack, path="/api/v1/x?q=" + "a" * size)
        assert status == expected, (size, status, out[:300])
        assert ("x-upstream: reached" in out.lower()) == (expected == 200)
        if expected == 414:
            assert '"code": "uri_too_long"' in out


def test_metrics_are_served_only_to_the_addresses_nginx_allows(stack):
    """/metrics (docs/operations.md#metrics): passed on from loopback (the allow list),
    refused by nginx itself, in the error shape, from any other address."""
    allowed = request(stack, "/metrics")
    assert allowed.upstream and allowed.status == 200
    assert allowed.json()["path"] == "/metrics"
    refused = request(stack, "/metrics", source="127.0.0.2")
    assert not refused.upstream
    assert refused.status == 403
    assert refused.headers["content-type"] == "application/json"
    assert refused.json()["error"]["code"] == "forbidden"
    # The rest of the site answers that address as before.
    assert request(stack, "/api/v1/catalog/gpus", source="127.0.0.2").upstream


def test_readiness_is_served_only_to_the_addresses_nginx_allows(stack):
    """/readyz (docs/operations.md#health) checks the database and opens a broker
    connection on every call: passed on from loopback (the allow list), refused by
    nginx itself, in the error shape, from any other address; /healthz stays open."""
    allowed = request(stack, "/readyz")
    assert allowed.upstream and allowed.status == 200 and allowed.json()["path"] == "/readyz"
    refused = request(stack, "/readyz", source="127.0.0.2")
    assert not refused.upstream and refused.status == 403
    assert refused.json()["error"]["code"] == "forbidden"
