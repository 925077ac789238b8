from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("rentals", "0004_order_account_status_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="order",
            name="client_network",
            field=models.CharField(
                blank=True,
                default="",
                editable=False,
                help_text="The client address the order came from (an IPv6 one as its /64), counted for the unpaid "
                "caps per address; empty when it was placed without a request.",
                max_length=43,
            ),
        ),
    ]
