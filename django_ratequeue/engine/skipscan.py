"""Distinct values of an indexed column, one index probe per value (docs/concepts.md)."""

from __future__ import annotations


def distinct_values(
    name: str,
    table: str,
    column: str,
    *,
    where: str = "",
    after: str = "",
    through: str = "",
    per: tuple[str, str] | None = None,
) -> str:
    """Return a recursive CTE, ``name(column)``, listing ``column``'s distinct values in order.

    Each value is found by one probe of an index on ``column`` (behind ``per``'s column
    and ``where``'s equalities, when given), however many rows hold it; the list ends
    with one NULL row, so read it with ``WHERE column IS NOT NULL``. ``table`` is quoted
    already and is aliased ``t``. ``where`` is a condition on its rows; ``after`` and
    ``through`` are SQL expressions (such as ``%s``) the values start after and stop at
    (included). With ``per=(group, values)``, the CTE is ``name(group, column)`` and
    lists the values of each ``group`` value that ``values`` (a SELECT naming that
    column) gives. Parameters come in the text's order: ``after``'s, ``through``'s in
    the first probe, ``values``', then ``through``'s in the probes that follow.
    """
    first = [where]
    following = [where]
    if per is not None:
        group = per[0]
        first.append(f"t.{group} = g.{group}")
        following.append(f"t.{group} = {name}.{group}")
    first += [f"t.{column} > {after}" if after else "", _through(column, through)]
    following += [f"t.{column} > {name}.{column}", _through(column, through)]
    probe = f"SELECT MIN(t.{column}) FROM {table} t"
    next_probe = f"({probe}{_where(following)}) FROM {name} WHERE {name}.{column} IS NOT NULL"
    if per is None:
        return f"{name}({column}) AS ({probe}{_where(first)} UNION ALL SELECT {next_probe})"
    group, values = per
    return (
        f"{name}({group}, {column}) AS (SELECT g.{group}, ({probe}{_where(first)})"
        f" FROM ({values}) g UNION ALL SELECT {name}.{group}, {next_probe})"
    )


def _through(column: str, through: str) -> str:
    return f"t.{column} <= {through}" if through else ""


def _where(conditions: list[str]) -> str:
    written = [condition for condition in conditions if condition]
    return f" WHERE {' AND '.join(written)}" if written else ""
