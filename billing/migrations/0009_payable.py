"""An invoice's subject becomes two columns, (subject_kind, subject_id), that
billing.payable dispatches on, instead of a string each reader parsed.

The columns come with database defaults, so a process of the release before
(which writes only `subject`) can go on inserting while this applies. The
migration is not atomic: each column is added in a statement of its own, and
the existing rows are filled in batches of BATCH, each committed on its own,
so no lock on the invoice table is held through the fill. The rows the old
release writes until it is stopped are filled by `manage.py
invoice_subjects_fill` (the same step, touching only rows whose kind is still
empty). `subject` stays, written in that release's form, for that release; a
later release drops it.

The old strings: "order:<id>" (an order's invoice), "rental:<id>:auto" and
"rental:<id>:manual" (a rental's renewal), "rental:<id>:usage" (its usage);
anything else ("test:1", "sandbox:demo") keeps its prefix as the kind and
its number, if it has one, as the id (else 0).
"""

from django.db import migrations, models, transaction

BATCH = 1000


def subject_parse(subject: str) -> tuple[str, int]:
    parts = subject.split(":")
    kind = parts[0][:16]
    number = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    if kind == "rental":
        kind = "usage" if parts[-1] == "usage" else "renewal"
    return kind, number


def subject_fill(apps, schema_editor):
    Invoice = apps.get_model("billing", "Invoice")
    last = 0
    while True:
        rows = list(
            Invoice.objects.filter(subject_kind="", pk__gt=last).order_by("pk").values_list("pk", "subject")[:BATCH]
        )
        if not rows:
            return
        with transaction.atomic(using=schema_editor.connection.alias):
            for pk, subject in rows:
                kind, number = subject_parse(subject)
                Invoice.objects.filter(pk=pk, subject_kind="").update(subject_kind=kind, subject_id=number)
        last = rows[-1][0]


class Migration(migrations.Migration):
    atomic = False  # the columns and each batch of the fill commit on their own

    dependencies = [
        ("billing", "0008_utxo_seen"),
    ]

    operations = [
        migrations.AddField(
            model_name="invoice",
            name="subject_id",
            field=models.BigIntegerField(
                db_default=0, help_text="The id of what it pays for (an order's, a rental's)."
            ),
        ),
        migrations.AddField(
            model_name="invoice",
            name="subject_kind",
            field=models.CharField(
                blank=True,
                db_default="",
                help_text="The kind of what it pays for: order, renewal, usage.",
                max_length=16,
            ),
        ),
        migrations.RunPython(subject_fill, migrations.RunPython.noop),
    ]
