from django.db import migrations, models


def provision_job_real(apps, schema_editor):
    """Each rental names its real provisioning job (the first `provision` one), or none."""
    Rental = apps.get_model("rentals", "Rental")
    ProvisioningJob = apps.get_model("rentals", "ProvisioningJob")
    for rental in Rental.objects.all().only("pk"):
        job = ProvisioningJob.objects.filter(rental_id=rental.pk, action="provision").order_by("created_at").first()
        Rental.objects.filter(pk=rental.pk).update(provision_job=job.pk if job else None)


class Migration(migrations.Migration):
    dependencies = [
        ("rentals", "0002_staff_names"),
    ]

    operations = [
        migrations.AlterField(
            model_name="rental",
            name="provision_job",
            field=models.UUIDField(
                blank=True,
                editable=False,
                help_text="Id of the provisioning job sent to operators, once there is one.",
                null=True,
            ),
        ),
        migrations.RunPython(provision_job_real, migrations.RunPython.noop),
    ]
