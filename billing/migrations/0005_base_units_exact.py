"""Base units stored exactly on every database (core.fields.BaseUnitsModelField).

PostgreSQL keeps its numeric(78, 0) columns as they are. On SQLite the columns
become text holding the number zero-padded to 78 digits; the rows copied over
are rewritten in that form. An amount SQLite held as an INTEGER (below 2**63)
comes over exact; one it had stored as a REAL (above 2**63) had lost its last
digits when it was written, and keeps the value it had.
"""

from decimal import Decimal

from django.db import migrations

import core.fields

COLUMNS = [
    ("Payment", "amount"),
    ("PaymentRequest", "amount_due"),
    ("StrayTransfer", "amount"),
    ("CreditEntry", "refund_amount"),
]


def padded_text(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        return
    q = connection.ops.quote_name
    digits = core.fields.BaseUnitsModelField.DIGITS
    with connection.cursor() as cursor:
        for model_name, column in COLUMNS:
            table = q(apps.get_model("billing", model_name)._meta.db_table)
            cursor.execute(f"SELECT id, {q(column)} FROM {table} WHERE {q(column)} IS NOT NULL")
            for pk, value in cursor.fetchall():
                text = f"{int(Decimal(str(value))):0{digits}d}"
                if text != value:
                    cursor.execute(f"UPDATE {table} SET {q(column)} = %s WHERE id = %s", [text, pk])


class Migration(migrations.Migration):
    dependencies = [("billing", "0004_payment_position_stray_transfers")]

    operations = [
        migrations.AlterField(
            model_name="creditentry",
            name="refund_amount",
            field=core.fields.BaseUnitsModelField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="payment",
            name="amount",
            field=core.fields.BaseUnitsModelField(),
        ),
        migrations.AlterField(
            model_name="paymentrequest",
            name="amount_due",
            field=core.fields.BaseUnitsModelField(help_text="Base units, rounded up."),
        ),
        migrations.AlterField(
            model_name="straytransfer",
            name="amount",
            field=core.fields.BaseUnitsModelField(help_text="Base units of the asset."),
        ),
        migrations.RunPython(padded_text, migrations.RunPython.noop),
    ]
