"""Content-Security-Policy for the HTML pages the project serves.

A policy is a mapping of directive -> sources. `STRICT` allows only what the
project serves itself: scripts, styles, images and fetches from the same
origin, no inline script or style, no plugins, no framing, forms that post
back to the same origin only. A page opts in with the decorator:

    @content_security_policy()                       # STRICT
    @content_security_policy(img_src=["'self'", "data:"])   # STRICT, one directive replaced

Directive names are written with underscores in keyword arguments
(`img_src` is `img-src`); `None` drops a directive. A response that already
carries a policy keeps it, so an inner decorator wins over an outer one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import wraps
from typing import Any

HEADER = "Content-Security-Policy"

STRICT: Mapping[str, Sequence[str]] = {
    "default-src": ["'none'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'"],
    "connect-src": ["'self'"],
    "font-src": ["'self'"],
    "form-action": ["'self'"],
    "base-uri": ["'none'"],
    "frame-ancestors": ["'none'"],
    "object-src": ["'none'"],
}


def csp_policy(base: Mapping[str, Sequence[str]] = STRICT, **overrides: Sequence[str] | None) -> dict[str, list[str]]:
    """`base` with directives replaced (or dropped, with None) by keyword."""
    policy = {name: list(sources) for name, sources in base.items()}
    for key, sources in overrides.items():
        name = key.replace("_", "-")
        if sources is None:
            policy.pop(name, None)
        else:
            policy[name] = list(sources)
    return policy


def csp_header_value(policy: Mapping[str, Sequence[str]]) -> str:
    """The header's text: directives joined by "; ", each with its sources."""
    for name, sources in policy.items():
        for source in [name, *sources]:
            if any(ch in source for ch in ";,\r\n"):
                raise ValueError(f"invalid character in CSP directive {name!r}: {source!r}")
    return "; ".join(" ".join([name, *sources]) if sources else name for name, sources in policy.items())


def content_security_policy(
    base: Mapping[str, Sequence[str]] = STRICT, **overrides: Sequence[str] | None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A view decorator that sends the policy with every response of the view."""
    value = csp_header_value(csp_policy(base, **overrides))

    def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(view)
        def wrapped(request: Any, *args: Any, **kwargs: Any) -> Any:
            response = view(request, *args, **kwargs)
            if HEADER not in response:
                response[HEADER] = value
            return response

        return wrapped

    return decorator
