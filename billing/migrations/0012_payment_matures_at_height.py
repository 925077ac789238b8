# A coinbase output settles only once it can be spent (billing/chains/utxo): the height it
# matures at is kept on its payment. A nullable column with no check: no rewrite, no scan.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0011_payment_late_rate'),
    ]

    operations = [
        migrations.AddField(
            model_name='payment',
            name='matures_at_height',
            field=models.BigIntegerField(blank=True, help_text="A coinbase output (a miner paid from a block's reward): it cannot be spent, and does not settle, before the chain's tip reaches this height, whatever the confirmation policy says.", null=True),
        ),
    ]
