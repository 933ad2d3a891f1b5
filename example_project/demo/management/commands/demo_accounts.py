from typing import Any

from django.core.management.base import BaseCommand

from example_project.demo.accounts import ADMIN, USERS, create_demo_accounts


class Command(BaseCommand):
    help = (
        f"Create the demo's accounts if missing: {ADMIN[0]}/{ADMIN[1]} (superuser) and "
        + ", ".join(f"{name}/{password}" for name, password in USERS.items())
        + "."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        created = create_demo_accounts()
        self.stdout.write(f"Created: {', '.join(created)}." if created else "Accounts exist.")
