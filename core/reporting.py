"""What error reports show: credentials inside URLs are masked.

Django's SafeExceptionReporterFilter (django/views/debug.py) hides a setting or
a request.META entry by its name (API, KEY, PASS, SECRET, TOKEN, ...). The
values that carry credentials here are URLs under other names: CACHES'
LOCATION and CELERY_BROKER_URL (redis://:password@host), a node's RPC URL
(http://user:password@host), a provider's URL with its key in the path or the
query (https://eth-mainnet.example/v2/<key>, ?api-key=<key>). With DEBUG on
(`make run`) its 500 page lists every setting and the frames' variables, and
error reports by mail list the same. This filter keeps Django's name-based
hiding and also masks, in every URL found in a string (settings, request.META,
cookies, frame variables, nested in dicts, lists and tuples):

- the userinfo: the password, or a user name that stands alone (a token);
- the value of a query parameter whose name says it is a secret;
- a path segment that looks like a key (long, letters and digits mixed);

and any other object (an exception, a client) whose repr names such a URL is
shown by its masked repr.

Everything else of the URL (scheme, host, port, the rest of the path) stays,
so the page still says where a connection went. The report itself
(CredentialsMaskingReporter) masks the same in the exception's message and
its causes', which a client library may have written a URL into.
"""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest
from django.views.debug import ExceptionReporter, SafeExceptionReporterFilter

# A URL inside any text: scheme://, then up to the first space, quote or angle bracket.
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s\"'<>]+")
# Query parameter names that hold secrets, beyond Django's hidden_settings words
# (API, AUTH, TOKEN, KEY, SECRET, PASS, SIGNATURE).
_SECRET_PARAM = re.compile(r"sig|pwd|credential|private|session|access|bearer", re.I)
# A path segment that is most likely a key: 20 or more URL-safe characters with
# both letters and digits (Infura's 32 hex digits, Alchemy's and QuickNode's tokens).
_KEY_SEGMENT = re.compile(r"^(?=[A-Za-z0-9_\-]*[0-9])(?=[A-Za-z0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{20,}$")
_MAX_DEPTH = 8


class _MaskedRepr:
    """Stands in for an object whose repr named a credential: shows the masked repr."""

    def __init__(self, text: str) -> None:
        self._text = text

    def __repr__(self) -> str:
        return self._text

    __str__ = __repr__


class CredentialsMaskingFilter(SafeExceptionReporterFilter):
    """DEFAULT_EXCEPTION_REPORTER_FILTER: Django's filter, plus URL credentials masked."""

    def _secret_param(self, name: str) -> bool:
        return bool(self.hidden_settings.search(name) or _SECRET_PARAM.search(name))

    def _mask_url(self, match: re.Match[str]) -> str:
        url = match.group(0)
        scheme, _, rest = url.partition("://")
        # authority / path ? query # fragment, split by hand: urllib would
        # normalise (and may refuse) what is shown, which must stay as written.
        # A password may hold a "/" it should have escaped: userinfo runs to the
        # last "@" before the query (a path with an "@" is masked too: harmless).
        before_query = re.split(r"[?#]", rest, maxsplit=1)[0]
        userinfo, at, _ = before_query.rpartition("@")
        rest = rest[len(userinfo) + 1 :] if at else rest
        end = min([len(rest)] + [i for i in (rest.find(sep) for sep in "/?#") if i != -1])
        hostport, tail = rest[:end], rest[end:]
        authority = hostport
        if at:
            user, colon, _password = userinfo.partition(":")
            if colon:
                userinfo = f"{user}:{self.cleansed_substitute}"
            elif user:
                userinfo = self.cleansed_substitute
            authority = f"{userinfo}@{hostport}"
        path, hash_, fragment = tail.partition("#")
        path, question, query = path.partition("?")
        path = "/".join(self.cleansed_substitute if _KEY_SEGMENT.match(part) else part for part in path.split("/"))
        if question:
            params = []
            for pair in query.split("&"):
                name, equals, _value = pair.partition("=")
                params.append(f"{name}={self.cleansed_substitute}" if equals and self._secret_param(name) else pair)
            query = "&".join(params)
        return f"{scheme}://{authority}{path}{question}{query}{hash_}{fragment}"

    def mask(self, value: Any, depth: int = 0) -> Any:
        """`value` with the credentials of every URL in it masked; dicts, lists
        and tuples are copied with their items masked (a few levels deep)."""
        if isinstance(value, str):
            return _URL.sub(self._mask_url, value) if "://" in value else value
        if depth >= _MAX_DEPTH:
            return value
        if isinstance(value, dict):
            return {k: self.mask(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [self.mask(v, depth + 1) for v in value]
        if isinstance(value, tuple):
            return tuple(self.mask(v, depth + 1) for v in value)
        if value is None or isinstance(value, bool | int | float | bytes):
            return value
        # Any other object (an exception, a client) is shown by its repr: masked
        # when it names a URL with a credential, as itself otherwise.
        try:
            shown = repr(value)
        except Exception:  # the report shows its own "Error in formatting" for it
            return value
        masked = _URL.sub(self._mask_url, shown) if "://" in shown else shown
        return value if masked == shown else _MaskedRepr(masked)

    def cleanse_setting(self, key: int | str, value: Any) -> Any:
        # Settings, request.META and cookies; Django recurses through dicts, lists and tuples itself.
        return self.mask(super().cleanse_setting(key, value))

    def cleanse_special_types(self, request: HttpRequest | None, value: Any) -> Any:
        # Every frame variable passes here (django.views.debug, get_traceback_frame_variables).
        return self.mask(super().cleanse_special_types(request, value))


class CredentialsMaskingReporter(ExceptionReporter):
    """DEFAULT_EXCEPTION_REPORTER: Django's report, with URL credentials masked in
    the exception's message and notes and in the causes shown above each frame
    (an HTTP client's error names the URL it asked, a key in its path included)."""

    def get_traceback_data(self) -> dict[str, Any]:
        data = super().get_traceback_data()
        masking = CredentialsMaskingFilter()
        for key in ("exception_value", "exception_notes"):
            if key in data:
                data[key] = masking.mask(data[key])
        for frame in data.get("frames", []):
            if frame.get("exc_cause") is not None:
                frame["exc_cause"] = masking.mask(str(frame["exc_cause"]))
        return data
