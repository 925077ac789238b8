"""Domain errors: raised by services, turned into the API error shape by
`core.api.exception_handler`. Codes are stable snake_case words clients rely on."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """A refusal a client can act on. `status` is the HTTP status the API answers."""

    status = 400

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        if status is not None:
            self.status = status
        self.details = details or {}

    def __repr__(self) -> str:
        return f"DomainError({self.code!r}, {self.message!r})"


class NotFound(DomainError):
    status = 404

    def __init__(self, message: str = "Not found.", *, code: str = "not_found", **kw: Any) -> None:
        super().__init__(code, message, **kw)


class Conflict(DomainError):
    status = 409


class Throttled(DomainError):
    """Too many requests of one kind in a window: 429 `throttled`. The API
    answers it with `Retry-After: retry_after` (core.api.exception_handler)."""

    status = 429

    def __init__(self, *, retry_after: int, message: str) -> None:
        super().__init__(
            "throttled", f"{message} Try again in {retry_after} seconds.", details={"retry_after_seconds": retry_after}
        )
        self.retry_after = retry_after
