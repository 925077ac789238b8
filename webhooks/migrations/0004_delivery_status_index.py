from django.db import migrations, models

from core.indexes import AddIndexConcurrently


class Migration(migrations.Migration):
    # The index is built while deliveries go on being written (core/indexes.py).
    atomic = False

    dependencies = [
        ("webhooks", "0003_attempt_error_category"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="webhookdelivery",
            index=models.Index(fields=["status", "created_at"], name="delivery_status_created"),
        ),
    ]
