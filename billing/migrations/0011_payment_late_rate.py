# A payment seen after its quote's rate lock is valued at the lower of the locked rate and the
# market's then (billing.services.payments): the rate it took is kept. A nullable column and a
# check constraint: no rewrite of the table, no lock beyond the catalog's.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0010_currency_from_families'),
    ]

    operations = [
        migrations.AddField(
            model_name='payment',
            name='late_rate_usd',
            field=models.DecimalField(blank=True, decimal_places=12, help_text="Seen after its request's rate lock ended, when the market rate then was below the locked rate: the rate it is valued and counted at (USD per whole coin). Empty: the locked rate.", max_digits=30, null=True),
        ),
        migrations.AlterField(
            model_name='payment',
            name='amount_usd',
            field=models.DecimalField(decimal_places=2, help_text="Its value, rounded down to the cent: at the request's locked rate, or at late_rate_usd.", max_digits=14),
        ),
        migrations.AddConstraint(
            model_name='payment',
            constraint=models.CheckConstraint(condition=models.Q(('late_rate_usd__isnull', True), ('late_rate_usd__gt', 0), _connector='OR'), name='payment_late_rate_positive'),
        ),
    ]
