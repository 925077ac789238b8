"""The catalog's trigger functions also send notifications (catalog/triggers.py),
which the web workers' change feed listens for (catalog/feed.py). PostgreSQL only."""

from django.db import migrations


def install(apps, schema_editor):
    from catalog.triggers import notify_functions_sql

    with schema_editor.connection.cursor() as cursor:
        for statement in notify_functions_sql(schema_editor.connection.vendor):
            cursor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("catalog", "0003_free_slots_and_version"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
