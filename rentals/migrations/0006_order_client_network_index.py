from django.db import migrations, models

from core.indexes import AddIndexConcurrently


class Migration(migrations.Migration):
    # The index is built while orders go on being written (core/indexes.py).
    atomic = False

    dependencies = [
        ("rentals", "0005_order_client_network"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="order",
            index=models.Index(fields=["client_network", "status"], name="rentals_ord_client__16edf0_idx"),
        ),
    ]
