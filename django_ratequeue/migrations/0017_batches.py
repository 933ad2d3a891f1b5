# Batches (issue 22): the batch table, the jobs' batch_id with a partial index of a batch's
# jobs by status, and cancel requests for a batch's jobs.
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_ratequeue", "0016_schedules"),
    ]

    operations = [
        migrations.CreateModel(
            name="Batch",
            fields=[
                ("id", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("owner", models.CharField(blank=True, default="", max_length=255)),
                ("on_complete", models.CharField(blank=True, default="", max_length=300)),
                ("context", models.JSONField(blank=True, null=True)),
                ("total", models.PositiveIntegerField(default=0)),
                ("created_at", models.DateTimeField()),
                ("sealed_at", models.DateTimeField(blank=True, null=True)),
                ("canceled_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("outcome", models.JSONField(blank=True, null=True)),
                ("callback_id", models.CharField(blank=True, default="", max_length=200)),
            ],
            options={
                "verbose_name": "batch",
                "verbose_name_plural": "batches",
            },
        ),
        migrations.AddField(
            model_name="cancelrequest",
            name="batch_id",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AddField(
            model_name="job",
            name="batch_id",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("batch_id", ""), _negated=True),
                fields=["batch_id", "status"],
                name="ratequeue_job_batch",
            ),
        ),
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(fields=["created_at", "id"], name="ratequeue_batch_created"),
        ),
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(
                condition=models.Q(("finished_at__isnull", True), ("sealed_at__isnull", False)),
                fields=["sealed_at"],
                name="ratequeue_batch_ending",
            ),
        ),
        migrations.AddIndex(
            model_name="batch",
            index=models.Index(
                condition=models.Q(("finished_at__isnull", False)),
                fields=["finished_at"],
                name="ratequeue_batch_finished",
            ),
        ),
    ]
