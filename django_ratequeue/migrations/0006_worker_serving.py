from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_ratequeue", "0005_runtime_limits")]

    operations = [
        migrations.AddField(
            model_name="loopstate",
            name="leader",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="workerheartbeat",
            name="serving",
            field=models.BooleanField(default=False),
        ),
    ]
