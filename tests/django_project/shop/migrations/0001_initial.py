from __future__ import annotations

from typing import ClassVar

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []

    operations: ClassVar[list[migrations.operations.base.Operation]] = [
        migrations.CreateModel(
            name="Order",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("item", models.CharField(max_length=100)),
                ("receipt_sent", models.BooleanField(default=False)),
            ],
        ),
        migrations.CreateModel(
            name="Ran",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("what", models.CharField(max_length=100)),
                ("arg", models.CharField(default="", max_length=100)),
            ],
        ),
    ]
