from django.db import migrations, models

from core.indexes import AddIndexConcurrently


class Migration(migrations.Migration):
    # The index is built while payments go on being written (core/indexes.py).
    atomic = False

    dependencies = [
        ("billing", "0012_payment_matures_at_height"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="payment",
            index=models.Index(fields=["chain", "block_height"], name="payment_chain_height"),
        ),
    ]
