"""A payment's "flagged for staff" becomes a field of its own (flagged_at,
flag_reason) instead of a lookup in the audit table; the payments already
flagged take the time and reason of their audit rows."""

from django.db import migrations, models


def flags_from_audit(apps, schema_editor):
    AuditEntry = apps.get_model("core", "AuditEntry")
    Payment = apps.get_model("billing", "Payment")
    rows = AuditEntry.objects.filter(
        action="payment.flagged", content_type__app_label="billing", content_type__model="payment"
    ).order_by("created_at")
    for entry in rows.iterator():
        if entry.object_id.isdigit():
            Payment.objects.filter(pk=int(entry.object_id), flagged_at__isnull=True).update(
                flagged_at=entry.created_at, flag_reason=entry.reason[:200]
            )


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0006_paymentrequest_amount_usd"),
        ("core", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.AddField(
            model_name="payment",
            name="flag_reason",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AddField(
            model_name="payment",
            name="flagged_at",
            field=models.DateTimeField(
                blank=True,
                help_text="When a watcher flagged it for staff (a transfer locked by an unlock time, ...); once per payment.",
                null=True,
            ),
        ),
        migrations.RunPython(flags_from_audit, migrations.RunPython.noop),
    ]
