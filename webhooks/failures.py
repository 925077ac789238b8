"""What a failed delivery attempt was, as the customer reads it
(WebhookAttempt.error_category): a category and a fixed sentence, never the
network library's own error text (webhooks.transport says why)."""

from django.db import models


class Failure(models.TextChoices):
    TARGET_NOT_ALLOWED = "target_not_allowed", "Target not allowed"  # the SSRF guard refused the URL or its address
    DNS = "dns", "Name does not resolve"
    TIMEOUT = "timeout", "Timed out"
    CONNECTION_REFUSED = "connection_refused", "Connection refused"
    CONNECTION_FAILED = "connection_failed", "Connection failed"  # unreachable, reset, closed before an answer
    TLS_ERROR = "tls_error", "TLS error"
    PROTOCOL_ERROR = "protocol_error", "No valid HTTP answer"  # closed, reset, or another protocol
    REDIRECT = "redirect", "Redirect (not followed)"
    HTTP_STATUS = "http_status", "Answered outside 2xx"
    INTERNAL_ERROR = "internal_error", "Internal error"
