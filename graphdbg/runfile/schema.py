"""The run file's identity and SQL, shared by its writer and its reader: the
tag in `meta.format`, the schema version `RunWriter` writes and
`graphdbg.runfile.query.Run` reads up to, and the statements made from the
tables' records (graphdbg/runfile/records.py: bump the version with them).
Its own module, so that the reader need not import the writer."""

import types
import typing

from .records import RECORDS

FORMAT = "graphdbg-run"
SCHEMA_VERSION = 3  # 2: node_values; 3: frames.col, end_col, cell

# The phases of a compile, in order, as the `graphdbg_compile_time` events
# hold them (hooks/record/trace.py `compile_phases` says what each is); they add up
# to the compile's total.
COMPILE_PHASES = ("dynamo", "graphdbg", "backend", "aot", "cache", "lowering", "codegen", "cpp")

_SQL_TYPES = {int: "INTEGER", float: "REAL", str: "TEXT", bytes: "BLOB"}


def _sql_type(annotation: object) -> str:
    if isinstance(annotation, types.UnionType):  # `int | None`: NULL allowed, as every column
        (annotation,) = [a for a in annotation.__args__ if a is not type(None)]
    return _SQL_TYPES[annotation]


def create_table(record: type) -> str:
    """The CREATE TABLE statement of a record's table. A one-column key is
    written on its column: `id INTEGER PRIMARY KEY` makes the id SQLite's
    rowid (numbered when inserted as NULL)."""
    key, unique = record.KEY, getattr(record, "UNIQUE", ())
    hints = typing.get_type_hints(record)
    cols = []
    for name in record._fields:
        col = f"{name} {_sql_type(hints[name])}"
        if key == (name,):
            col += " PRIMARY KEY"
        if name in unique:
            col += " UNIQUE"
        cols.append(col)
    if len(key) > 1:
        cols.append(f"PRIMARY KEY ({', '.join(key)})")
    return f"CREATE TABLE {record.TABLE} ({', '.join(cols)});"


SCHEMA = "\n".join(create_table(r) for r in RECORDS)


def columns(record: type, alias: str = "") -> str:
    """A record's columns in field order, for a SELECT (``alias``: of a join)."""
    return ", ".join(f"{alias}.{c}" if alias else c for c in record._fields)


def select(record: type) -> str:
    """SELECT of a record's table, its columns in field order: `record._make(row)`
    reads the rows. Add WHERE, ORDER BY..."""
    return f"SELECT {columns(record)} FROM {record.TABLE} "


def insert(record: type, verb: str = "INSERT") -> str:
    """INSERT (``verb``: or INSERT OR REPLACE) of whole records."""
    return (f"{verb} INTO {record.TABLE} ({columns(record)}) "
            f"VALUES ({','.join('?' * len(record._fields))})")
