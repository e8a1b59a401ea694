"""Plain-text tables for Ansible failure messages and logs (rich renders the CLI's own)."""

from __future__ import annotations


def text_table(rows: list[dict[str, str]], columns: tuple[str, ...] | list[str], empty: str = "") -> str:
    """Rows as an aligned plain-text table (Ansible failure messages and logs)."""
    if not rows:
        return empty
    widths = [max(len(column), *(len(str(row.get(column, ""))) for row in rows)) for column in columns]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(str(row.get(c, "")).ljust(w) for c, w in zip(columns, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)
