"""A griffe extension for the docs site's Python reference (mkdocs.yml): the docstrings'
Sphinx roles and repository paths, as the site's Markdown shows them.

``:func:`~django_ratequeue.jobs.enqueue``` becomes ```enqueue```, ``:meth:`.result```
becomes ```result```, and ``docs/eta.md`` the page's title in the site's navigation.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import griffe

ROLE = re.compile(r":[a-z]+:`(?:[^`<]*<)?([~.]*)([^`>]+)>?`")
PAGE = re.compile(r"docs/([a-z0-9-]+)\.md")
NAV = Path(__file__).resolve().parents[1] / "mkdocs.yml"


def titles() -> dict[str, str]:
    """Return each page's title in the navigation, by its file's name without ``.md``."""
    found = re.findall(r"-\s+([^:\n]+):\s+(\S+)\.md\s*$", NAV.read_text(encoding="utf-8"), re.M)
    return {name: title.strip() for title, name in found}


def readable(text: str, pages: dict[str, str]) -> str:
    """Return ``text`` with its roles as code and its repository paths as page titles."""

    def role(match: re.Match[str]) -> str:
        prefix, target = match.groups()
        return f"`{target.rpartition('.')[2] if '~' in prefix else target}`"

    def page(match: re.Match[str]) -> str:
        title = pages.get(match.group(1))
        return f"*{title}*" if title else match.group(0)

    return PAGE.sub(page, ROLE.sub(role, text))


class DocstringRoles(griffe.Extension):
    """Rewrite every docstring that griffe loads (see the module's docstring)."""

    def __init__(self) -> None:
        self.pages = titles()

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = readable(obj.docstring.value, self.pages)
