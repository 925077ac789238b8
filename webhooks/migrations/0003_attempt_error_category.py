"""WebhookAttempt.error_category, and the attempts logged before it told in
categories: their raw network errors (which said what listened on a port) are
replaced by the category's sentence (webhooks/transport.py)."""

from django.db import migrations, models

# Copies of webhooks.transport's sentences as they were written with this migration.
_REFUSED = "The connection was refused."
_FAILED = "Could not connect."
_TLS = "TLS failed: the handshake did not complete."
_PROTOCOL = "No valid HTTP answer (the receiver closed the connection or spoke another protocol)."
_INTERNAL = "Internal error; it has been logged."
_GUARD_PREFIXES = ("Webhooks are ", "A webhook URL ", "This is not a valid URL", "A port is ")


def categorize(status_code, error):
    """(category, sentence) for an attempt logged with the raw error text."""
    if not error:
        if status_code is None or 200 <= status_code < 300:
            return "", ""
        return "http_status", f"The receiver answered {status_code}."
    if error == "Redirects are not followed.":
        return "redirect", f"The receiver answered {status_code}: redirects are not followed."
    if error.startswith("Timed out after "):
        return "timeout", error
    if error.startswith(_GUARD_PREFIXES):
        return "target_not_allowed", error
    if error.startswith("The name ") and error.endswith(" does not resolve."):
        return "dns", error
    if error.startswith("Internal error"):
        return "internal_error", _INTERNAL
    lowered = error.lower()
    if "ssl" in lowered or "certificate" in lowered or "tls" in lowered:
        return "tls_error", _TLS
    if "refused" in lowered:
        return "connection_refused", _REFUSED
    if lowered.startswith("could not connect"):
        return "connection_failed", _FAILED
    return "protocol_error", _PROTOCOL  # connected, then no HTTP answer (ReadError, RemoteProtocolError...)


def forwards(apps, schema_editor):
    WebhookAttempt = apps.get_model("webhooks", "WebhookAttempt")
    changed = []
    for attempt in WebhookAttempt.objects.exclude(error="", status_code__lt=300).iterator(chunk_size=2000):
        category, error = categorize(attempt.status_code, attempt.error)
        if (category, error) != (attempt.error_category, attempt.error):
            attempt.error_category, attempt.error = category, error
            changed.append(attempt)
        if len(changed) >= 2000:
            WebhookAttempt.objects.bulk_update(changed, ["error_category", "error"])
            changed = []
    WebhookAttempt.objects.bulk_update(changed, ["error_category", "error"])


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0002_staff_names"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhookattempt",
            name="error_category",
            field=models.CharField(
                blank=True,
                choices=[
                    ("target_not_allowed", "Target not allowed"),
                    ("dns", "Name does not resolve"),
                    ("timeout", "Timed out"),
                    ("connection_refused", "Connection refused"),
                    ("connection_failed", "Connection failed"),
                    ("tls_error", "TLS error"),
                    ("protocol_error", "No valid HTTP answer"),
                    ("redirect", "Redirect (not followed)"),
                    ("http_status", "Answered outside 2xx"),
                    ("internal_error", "Internal error"),
                ],
                max_length=32,
            ),
        ),
        migrations.RunPython(forwards, migrations.RunPython.noop, elidable=True),
    ]
