"""The demo's accounts: the superuser of the admin, and two users who take turns asking
the model. Their passwords are shown on the login page: this is a demo on your machine."""

from __future__ import annotations

from django.contrib.auth import get_user_model

ADMIN = ("admin", "admin")
USERS = {"alice": "alice", "bob": "bob"}


def create_demo_accounts() -> list[str]:
    """Create the accounts that do not exist yet (existing ones are left as they are);
    returns the names created."""
    User = get_user_model()
    created = []
    if not User.objects.filter(username=ADMIN[0]).exists():
        User.objects.create_superuser(ADMIN[0], f"{ADMIN[0]}@example.com", ADMIN[1])
        created.append(ADMIN[0])
    for username, password in USERS.items():
        if not User.objects.filter(username=username).exists():
            User.objects.create_user(username, f"{username}@example.com", password)
            created.append(username)
    return created
