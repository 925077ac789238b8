"""core.csp: the Content-Security-Policy decorator pages opt into."""

import pytest
from django.http import HttpResponse
from django.test import RequestFactory

from core.csp import HEADER, STRICT, content_security_policy, csp_header_value, csp_policy


def test_strict_allows_only_the_project_itself():
    value = csp_header_value(STRICT)
    assert "default-src 'none'" in value and "script-src 'self'" in value and "frame-ancestors 'none'" in value
    assert "unsafe-inline" not in value and "unsafe-eval" not in value and "*" not in value


def test_directives_are_replaced_or_dropped_by_keyword():
    policy = csp_policy(img_src=["'self'", "data:"], object_src=None, worker_src=["'none'"])
    assert policy["img-src"] == ["'self'", "data:"]
    assert "object-src" not in policy and policy["worker-src"] == ["'none'"]
    assert STRICT["img-src"] == ["'self'"]  # the base is not changed


@pytest.mark.parametrize("bad", ["'self'; script-src *", "a,b", "x\r\ny"])
def test_no_directive_can_be_smuggled_in(bad):
    with pytest.raises(ValueError):
        csp_header_value(csp_policy(img_src=[bad]))


def test_the_decorator_sets_the_header_and_keeps_an_inner_one():
    @content_security_policy()
    def view(request):
        return HttpResponse("ok")

    @content_security_policy()
    @content_security_policy(img_src=["'self'", "data:"])
    def inner_wins(request):
        return HttpResponse("ok")

    request = RequestFactory().get("/")
    assert view(request)[HEADER] == csp_header_value(STRICT)
    assert "img-src 'self' data:" in inner_wins(request)[HEADER]
