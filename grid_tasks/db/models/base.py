"""Declarative base, naming convention and the column types every model shares."""

from __future__ import annotations

from datetime import datetime, timezone
from enum import Enum
from typing import Any, Generic, TypeVar

from sqlalchemy import JSON, DateTime, MetaData, String, event, inspect
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.mutable import MutableDict, MutableList
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import TypeDecorator

from grid_tasks.db.errors import RecordError

# Named constraints keep Alembic's batch mode (SQLite) and drift checks deterministic.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Root of every grid_tasks table."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    SQLite forgets the offset and PostgreSQL converts to the session zone, so
    values are normalised to UTC on the way in and come back aware either way.
    Naive datetimes are taken to be UTC already.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


E = TypeVar("E", bound=Enum)


class EnumText(TypeDecorator[E], Generic[E]):
    """A ``str`` enum stored as its value in a plain VARCHAR.

    No native ENUM type and no CHECK constraint: adding a member later needs no
    migration, and both backends store the readable value (``Running``, ``DONE``).
    """

    impl = String(32)
    cache_ok = True

    def __init__(self, enum_cls: type[E], length: int = 32) -> None:
        super().__init__(length)
        self.enum_cls = enum_cls

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        if value is None:
            return None
        return self.enum_cls(value).value

    def process_result_value(self, value: Any, dialect: Dialect) -> E | None:
        if value is None:
            return None
        return self.enum_cls(value)

    def copy(self, **kw: Any) -> "EnumText[E]":
        return EnumText(self.enum_cls, self.impl.length)


def utcnow() -> datetime:
    """Default for bookkeeping timestamps (created/updated); domain times are arguments."""
    return datetime.now(timezone.utc)


# JSON columns that notice in-place changes (``job.holds.append(...)``).
JSONList = MutableList.as_mutable(JSON)
JSONDict = MutableDict.as_mutable(JSON)


def _check_lengths(_mapper: Any, _connection: Any, target: Base) -> None:
    """Refuse over-long strings before the database sees them.

    PostgreSQL rejects them with an untyped DataError and SQLite silently
    stores them; both backends should behave alike, with an error naming the field.
    """
    check_lengths(inspect(target).mapper, lambda key: getattr(target, key))


def check_lengths(mapper: Any, value_of: Any) -> None:
    """RecordError naming ``table.column`` for the first string longer than its column
    holds; ``value_of(attribute)`` gives the values (also for Core inserts, which the
    ORM listeners do not see)."""
    for key, column in _limited_columns(mapper):
        value = value_of(key)
        if isinstance(value, str) and len(value) > column.type.length:
            raise RecordError(f"{mapper.local_table.name}.{column.name}: at most "
                              f"{column.type.length} characters, got {len(value)} "
                              f"({value[:40]!r}...)")


def table_row(mapper: Any, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (by attribute) as a row for a Core statement on the mapper's table (by
    column name), after :func:`check_lengths`: what an ORM flush would write."""
    check_lengths(mapper, values.get)
    names = column_names(mapper)
    return {names[key]: value for key, value in values.items()}


_names: dict[Any, dict[str, str]] = {}


def column_names(mapper: Any) -> dict[str, str]:
    """Attribute -> column name of a mapper's columns (``user`` -> ``user_name``), once."""
    found = _names.get(mapper)
    if found is None:
        found = _names[mapper] = {attr.key: attr.columns[0].name
                                  for attr in mapper.column_attrs}
    return found


_limited: dict[Any, list[tuple[str, Any]]] = {}


def _limited_columns(mapper: Any) -> list[tuple[str, Any]]:
    """(attribute, column) of a mapper's length-limited string columns, worked out once:
    every flushed row is checked, and walking all its columns each time was a tenth of
    a node daemon's CPU (bench_gram)."""
    found = _limited.get(mapper)
    if found is None:
        found = _limited[mapper] = [
            (attr.key, attr.columns[0]) for attr in mapper.column_attrs
            if getattr(attr.columns[0].type, "length", None) is not None
            and not isinstance(attr.columns[0].type, TypeDecorator)]
    return found


event.listen(Base, "before_insert", _check_lengths, propagate=True)
event.listen(Base, "before_update", _check_lengths, propagate=True)
