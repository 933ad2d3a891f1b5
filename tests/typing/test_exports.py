"""The package's exports: what runs (the lazy ``_EXPORTS``), what a type checker sees (the
``TYPE_CHECKING`` imports) and ``__all__`` are the same names from the same modules."""

import ast
from importlib import import_module
from pathlib import Path

import django_ratequeue


def typed_exports() -> dict[str, str]:
    """name -> module of each ``if TYPE_CHECKING:`` import in the package's __init__."""
    tree = ast.parse(Path(django_ratequeue.__file__).read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.unparse(statement)
                for alias in statement.names:
                    assert alias.asname == alias.name, "export each name as itself"
                    found[alias.name] = "." * statement.level + (statement.module or "")
    return found


def test_typed_and_runtime_exports_are_the_same() -> None:
    assert typed_exports() == django_ratequeue._EXPORTS
    assert sorted(django_ratequeue.__all__) == sorted(django_ratequeue._EXPORTS)
    assert len(set(django_ratequeue.__all__)) == len(django_ratequeue.__all__)


def test_every_export_is_the_object_its_module_defines() -> None:
    for name, module in django_ratequeue._EXPORTS.items():
        defined = getattr(import_module(module, "django_ratequeue"), name)
        assert getattr(django_ratequeue, name) is defined, name
