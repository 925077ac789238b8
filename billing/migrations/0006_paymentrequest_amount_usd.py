"""Each payment request says how much of its invoice it asks for (amount_usd),
so a partly paid invoice can be re-quoted for the rest. Requests made before
asked for their invoice's whole total."""

from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def totals_fill(apps, schema_editor):
    Invoice = apps.get_model("billing", "Invoice")
    PaymentRequest = apps.get_model("billing", "PaymentRequest")
    PaymentRequest.objects.filter(amount_usd__isnull=True).update(
        amount_usd=Subquery(Invoice.objects.filter(pk=OuterRef("invoice_id")).values("total_usd")[:1])
    )


class Migration(migrations.Migration):
    dependencies = [("billing", "0005_base_units_exact")]

    operations = [
        migrations.AddField(
            model_name="paymentrequest",
            name="amount_usd",
            field=models.DecimalField(decimal_places=2, max_digits=12, null=True),
        ),
        migrations.RunPython(totals_fill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="paymentrequest",
            name="amount_usd",
            field=models.DecimalField(
                decimal_places=2,
                help_text="The USD this request asks for: the invoice's total, or what was left of it when the "
                "request was made (a fresh quote of a partly paid invoice).",
                max_digits=12,
            ),
        ),
        migrations.AddConstraint(
            model_name="paymentrequest",
            constraint=models.CheckConstraint(condition=models.Q(amount_usd__gt=0), name="request_amount_usd_positive"),
        ),
    ]
