from django.db import migrations, models

from core.indexes import AddIndexConcurrently, RemoveIndexConcurrently


class Migration(migrations.Migration):
    # The unpaid caps count an account's and an address's orders that closed unpaid
    # lately (rentals/services/unpaid.py): by a range of closed_at, not their whole
    # history. The new indexes lead with the old ones' columns, which they replace;
    # built first, then the old dropped, while orders go on being written (core/indexes.py).
    atomic = False

    dependencies = [
        ("rentals", "0007_benchmarks"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="order",
            index=models.Index(fields=["account", "status", "closed_at"], name="rentals_ord_account_d00b74_idx"),
        ),
        AddIndexConcurrently(
            model_name="order",
            index=models.Index(fields=["client_network", "status", "closed_at"], name="rentals_ord_client__c3d55c_idx"),
        ),
        RemoveIndexConcurrently(model_name="order", name="rentals_ord_account_8e211c_idx"),
        RemoveIndexConcurrently(model_name="order", name="rentals_ord_client__16edf0_idx"),
    ]
