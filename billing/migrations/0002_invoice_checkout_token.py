"""Every invoice gets a checkout token: added nullable, filled with a fresh
random token per existing invoice, then made unique and required."""

import secrets

from django.db import migrations, models

import billing.models.invoices


def tokens_fill(apps, schema_editor):
    Invoice = apps.get_model("billing", "Invoice")
    for invoice in Invoice.objects.filter(checkout_token__isnull=True).only("pk").iterator():
        Invoice.objects.filter(pk=invoice.pk).update(checkout_token=secrets.token_urlsafe(32))


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="invoice",
            name="checkout_token",
            field=models.CharField(editable=False, max_length=64, null=True),
        ),
        migrations.RunPython(tokens_fill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="invoice",
            name="checkout_token",
            field=models.CharField(
                default=billing.models.invoices.checkout_token_new,
                editable=False,
                help_text="Opens the invoice's checkout page (/pay/<token>) without logging in.",
                max_length=64,
                unique=True,
            ),
        ),
    ]
