# The claims of de-duplicated and debounced enqueues (issue 22, part 3): one row per
# unique key, pointing at the job that answers it until it expires.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_ratequeue", "0017_batches"),
    ]

    operations = [
        migrations.CreateModel(
            name="UniqueClaim",
            fields=[
                ("key", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("job_id", models.CharField(max_length=200)),
                ("expires_at", models.DateTimeField(db_index=True)),
            ],
            options={
                "verbose_name": "unique claim",
            },
        ),
    ]
