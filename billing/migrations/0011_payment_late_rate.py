# A payment seen after its quote's rate lock is valued at the lower of the locked rate and the
# market's then (billing.services.payments): the rate it took is kept. A nullable column (no
# rewrite of the table), and its check constraint added NOT VALID and then validated on
# PostgreSQL, each in its own transaction: the validating scan takes a lock (SHARE UPDATE
# EXCLUSIVE) that lets watchers go on recording payments.

from django.db import migrations, models

CONSTRAINT = models.CheckConstraint(
    condition=models.Q(("late_rate_usd__isnull", True), ("late_rate_usd__gt", 0), _connector="OR"),
    name="payment_late_rate_positive",
)


def add_check(apps, schema_editor):
    payment = apps.get_model("billing", "Payment")
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.add_constraint(payment, CONSTRAINT)
        return
    table = schema_editor.quote_name(payment._meta.db_table)
    name = schema_editor.quote_name(CONSTRAINT.name)
    schema_editor.execute(
        f"ALTER TABLE {table} ADD CONSTRAINT {name} CHECK (late_rate_usd IS NULL OR late_rate_usd > 0) NOT VALID"
    )
    schema_editor.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}")


def drop_check(apps, schema_editor):
    schema_editor.remove_constraint(apps.get_model("billing", "Payment"), CONSTRAINT)


class Migration(migrations.Migration):
    # Each step commits on its own: VALIDATE must not run under the lock ADD CONSTRAINT took.
    atomic = False

    dependencies = [
        ('billing', '0010_currency_from_families'),
    ]

    operations = [
        migrations.AddField(
            model_name='payment',
            name='late_rate_usd',
            field=models.DecimalField(blank=True, decimal_places=12, help_text="Seen after its quote's rate lock ended, when the market rate then was below the locked rate: the rate it is valued and counted at (USD per whole coin); for a quote still live, the locked rate for what the invoice lacked and the market's for the rest. Empty: the locked rate.", max_digits=30, null=True, verbose_name='late rate (USD a coin)'),
        ),
        migrations.AlterField(
            model_name='payment',
            name='amount_usd',
            field=models.DecimalField(decimal_places=2, help_text="Its value, rounded down to the cent: at the request's locked rate, or at late_rate_usd.", max_digits=14),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddConstraint(model_name='payment', constraint=CONSTRAINT)],
            database_operations=[migrations.RunPython(add_check, drop_check)],
        ),
    ]
