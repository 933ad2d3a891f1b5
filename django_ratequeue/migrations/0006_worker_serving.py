from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("django_ratequeue", "0005_runtime_limits")]

    operations = [
        migrations.AddField(
            model_name="workerheartbeat",
            name="serving",
            field=models.BooleanField(default=False),
        ),
    ]
