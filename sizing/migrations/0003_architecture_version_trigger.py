"""Architectures change the sizing answers: a write to them moves the catalog
version (catalog/triggers.py), so cached recommendations are never stale."""

from django.db import migrations


def install(apps, schema_editor):
    from catalog.triggers import version_trigger_sql

    connection = schema_editor.connection
    with connection.cursor() as cursor:
        for statement in version_trigger_sql(connection.vendor, "sizing_architecture"):
            cursor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("sizing", "0002_architecture_config"),
        ("catalog", "0003_free_slots_and_version"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
