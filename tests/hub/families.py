"""Schema families for testing the migration runner itself (the hub's own family is agentctl.hub.migrations.HUB).

`DEMO` has two versions of several statements each, in both dialects; `broken_demo()` the same with a
second version that fails half way; `gated(gate_sql)` a one-version family whose step runs `gate_sql`
(a test holds it there).
"""

from __future__ import annotations

from agentctl.migrations import Family, Migration

_V1 = ("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)",
       "CREATE TABLE notes (item_id INTEGER NOT NULL, body TEXT)",
       "INSERT INTO items (id, name) VALUES (1, 'seed')")
_V2 = ("ALTER TABLE items ADD COLUMN size INTEGER NOT NULL DEFAULT 0",
       "CREATE INDEX notes_by_item ON notes (item_id)",
       "UPDATE items SET size = 7 WHERE id = 1")
TABLES = ("items", "notes")


def _family(name: str, *steps: tuple[str, ...]) -> Family:
    migrations = tuple(Migration(n, f"demo step {n}", sql, sql) for n, sql in enumerate(steps, 1))
    return Family(name=name, what="demo database", migrations=migrations, tables=TABLES,
                  upgrade_hint="run the demo migrations")


DEMO = _family("demo", _V1, _V2)
DEMO_V1_ONLY = _family("demo", _V1)


def broken_demo() -> Family:
    return _family("demo", _V1, (_V2[0], "INSERT INTO no_such_table VALUES (1)", _V2[2]))


def gated(gate_sql: str) -> Family:
    return _family("demo", (*_V1, gate_sql), _V2)
