"""The UTXO watchers' seen-set of mempool transactions (billing.models.MempoolSeen):
a restarted worker decodes only the transactions that entered the mempool since."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0007_payment_flagged_at"),
    ]

    operations = [
        migrations.CreateModel(
            name="MempoolSeen",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("chain", models.CharField(max_length=16)),
                ("txid", models.CharField(max_length=64)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("chain", "txid"), name="mempoolseen_chain_txid_unique")
                ],
            },
        ),
    ]
