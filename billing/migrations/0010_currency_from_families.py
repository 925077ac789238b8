# The pay currencies come from the chain families' declarations (billing/chains/spec.py), not from
# model choices: a family added later needs no migration. No SQL: choices live in Python only.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0009_payable'),
    ]

    operations = [
        migrations.AlterField(
            model_name='creditentry',
            name='refund_currency',
            field=models.CharField(blank=True, max_length=8),
        ),
        migrations.AlterField(
            model_name='payment',
            name='currency',
            field=models.CharField(max_length=8),
        ),
        migrations.AlterField(
            model_name='paymentrequest',
            name='currency',
            field=models.CharField(max_length=8),
        ),
        migrations.AlterField(
            model_name='ratesample',
            name='currency',
            field=models.CharField(max_length=8),
        ),
    ]
