"""An operator's emitted rows (dicts) as one Arrow record batch of the output schema.

``pa.RecordBatch.from_pylist`` does this row by row, and turns every timezone-aware
datetime into an instant with a call back into Python (its ``utcoffset``): at 10k rows
with three struct columns that is half of the conversion. Here the rows are taken apart
column by column instead (struct fields and list items recursively), and each distinct
datetime is converted once however many rows hold it (a shard's rows share a few
timestamps). A column whose values are not what this
path knows (a tuple for a struct, a pandas Timestamp, ...) goes to ``pa.array`` as it
is, and if anything fails the whole batch goes the row-by-row way, whose errors name the
column; so the result is the same either way.

A dict key that names no column (a misspelled one, say) is an error naming the key and
the columns, also inside structs; a missing key is a null. Checking costs one ``len`` per
row in C: a row has no unknown key when it holds every column and no more keys than there
are columns, and the column extraction already finds out whether every row holds every
column. Only when one does not (or holds more keys) are the key sets compared, still in C.
"""
from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from operator import itemgetter

from .errors import SparkOpsError

_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_EPOCH = _dt.datetime(1970, 1, 1)
_US = _dt.timedelta(microseconds=1)
_DICTS = frozenset({dict, type(None)})
_LISTS = frozenset({list, type(None)})
_DATETIMES = frozenset({_dt.datetime, type(None)})


def rows_to_arrow(rows: list, schema):
    """The rows (dicts or other mappings, or sequences in the schema's column order) as a
    record batch of ``schema`` (Arrow; timestamps in UTC, and naive datetimes taken as
    UTC). A value that does not fit its column is a TypeError naming the column, a key
    that names no column (or struct field) an UnknownKeyError (a TypeError) naming it."""
    import pyarrow as pa
    names = schema.names
    if set(map(type, rows)) - {dict}:
        rows = [_as_dict(r, names) for r in rows]
    missed: list = []
    try:
        columns = [_column(_field(rows, f.name, missed=missed), f.type, f.name) for f in schema]
        batch = pa.RecordBatch.from_arrays(columns, schema=schema)
    except UnknownKeyError:
        raise
    except (pa.ArrowException, TypeError, ValueError, OverflowError, AttributeError):
        _check_keys(rows, names)            # a misspelled key first: it may be why a value is missing
        batch = _row_by_row(rows, schema)   # which says what does not fit
    else:
        if missed or (rows and max(map(len, rows)) > len(names)):
            _check_keys(rows, names)
    if _strict(schema):
        _check_not_null(batch, schema)
    return batch


class UnknownKeyError(SparkOpsError, TypeError):
    """An emitted dict holds a key that names no output column (or struct field): a
    TypeError that names the key (``spark_ops.UnknownKeyError``)."""


def _as_dict(row, names: list) -> dict:
    """An emitted row that is not a dict: another mapping (a persisted dict), or values in
    column order (a tuple or list; more values than columns is an error)."""
    if isinstance(row, dict):
        return row
    if isinstance(row, Mapping):
        return dict(row)
    values = tuple(row)
    if len(values) > len(names):
        raise TypeError(f"spark_ops: the operator emitted a row of {len(values)} values, but the output schema "
                        f"has {len(names)} columns ({', '.join(names)}): {_short(values)}")
    return dict(zip(names, values))


def _check_keys(dicts, names: list, where: str | None = None) -> None:
    """A TypeError naming the first key of ``dicts`` (dicts or None) that is none of
    ``names`` (the output columns, or the fields of struct column ``where``). In C unless
    one is found."""
    known = frozenset(names)
    if all(map(known.issuperset, filter(None, dicts))):
        return
    bad = next(d for d in dicts if d and not known.issuperset(d))
    unknown = [k for k in bad if k not in known]
    missing = [n for n in names if n not in bad]
    what = "the output schema has no column" if where is None else f"the struct {where!r} has no field"
    hint = f"; the row has no {', '.join(map(repr, missing))}" if missing else ""
    raise UnknownKeyError(f"spark_ops: the operator emitted key(s) {', '.join(map(repr, unknown))}, for which "
                          f"{what} (it has {', '.join(names)}){hint}: {_short(bad)}")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:199] + "…"


def _strict(schema) -> bool:
    """Whether any field of the schema, nested ones included, is NOT NULL."""
    import pyarrow as pa
    todo = list(schema)
    while todo:
        f = todo.pop()
        if not f.nullable:
            return True
        if pa.types.is_struct(f.type):
            todo.extend(f.type)
        elif pa.types.is_list(f.type) or pa.types.is_large_list(f.type):
            todo.append(f.type.value_field)
    return False


def _check_not_null(batch, schema) -> None:
    """A null where the output schema says NOT NULL is an error naming the column: Arrow
    builds it without complaint, and Spark then fails reading it ("Value at index is
    null") without saying where."""
    for column, f in zip(batch.columns, schema):
        path = _null_in(column, f, None)
        if path is not None:
            raise TypeError(f"spark_ops: the operator emitted a null for {path!r}, which the output schema "
                            f"declares NOT NULL")


def _null_in(array, field, valid) -> str | None:
    """The path of a NOT NULL field holding a null where its parents are not null (``valid``:
    a mask of the positions that count, None for all), or None."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if not field.nullable and array.null_count:
        nulls = array.is_null() if valid is None else pc.and_(array.is_null(), valid)
        if pc.any(nulls).as_py():
            return field.name
    t = field.type
    if pa.types.is_struct(t):
        here = array.is_valid() if valid is None else pc.and_(array.is_valid(), valid)
        for i, child in enumerate(t):
            path = _null_in(array.field(i), child, here)
            if path is not None:
                return f"{field.name}.{path}"
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        # flatten() keeps the items of lists that are not null; a list under a null parent
        # has no items (both ways of building the batch leave it empty)
        path = _null_in(array.flatten(), t.value_field, None)
        if path is not None:
            return f"{field.name}[].{path}"
    return None


def _row_by_row(rows: list, schema):
    import pyarrow as pa
    try:
        return pa.RecordBatch.from_pylist(rows, schema=schema)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
        for f in schema:
            try:
                pa.array([r.get(f.name) for r in rows], type=f.type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as ce:
                raise TypeError(f"spark_ops: the operator emitted a value that does not fit output column "
                                f"{f.name!r} ({f.type}): {ce}") from e
        raise TypeError(f"spark_ops: the operator's rows do not fit the output schema {schema}: {e}") from e


def _column(values: list, typ, where: str):
    """One column (or struct field, or list items) of Python values as an Arrow array;
    ``where``: its path in the row, for errors."""
    import pyarrow as pa
    if pa.types.is_struct(typ) and typ.num_fields:
        values, kinds = _plain_mappings(values)
        if kinds <= _DICTS:
            nulls = type(None) in kinds
            names = typ.names
            missed: list = []
            children = [_column(_field(values, f.name, nulls, missed), f.type, f"{where}.{f.name}") for f in typ]
            if nulls or missed or (values and max(map(len, values)) > len(names)):
                _check_keys(values, names, where)
            mask = pa.array([v is None for v in values], pa.bool_()) if nulls else None
            return pa.StructArray.from_arrays(children, fields=list(typ), mask=mask)
    elif pa.types.is_list(typ):
        kinds = set(map(type, values))
        if kinds <= _LISTS:
            offsets = [0]
            items: list = []
            for v in values:
                if v is not None:
                    items += v
                offsets.append(len(items))
            mask = pa.array([v is None for v in values], pa.bool_()) if type(None) in kinds else None
            return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), _column(items, typ.value_type, f"{where}[]"),
                                            type=typ, mask=mask)
    elif pa.types.is_map(typ):
        values, _ = _plain_mappings(values)
    elif pa.types.is_timestamp(typ) and typ.unit == "us":
        distinct = set(values)      # equal instants hash alike, whatever their zone
        if set(map(type, distinct)) <= _DATETIMES:
            return pa.array(_micros(values, distinct), typ)
    return pa.array(values, typ)


def _plain_mappings(values: list) -> tuple[list, set]:
    """(values, their types), with mappings that are not dicts (persisted dicts) made dicts."""
    kinds = set(map(type, values))
    if not kinds <= _DICTS and all(issubclass(k, Mapping) for k in kinds - _DICTS):
        values = [v if type(v) in _DICTS else dict(v) for v in values]
        kinds = set(map(type, values))
    return values, kinds


def _field(values: list, name: str, nulls: bool = False, missed: list | None = None) -> list:
    """``v.get(name)`` of each dict ``v`` (None for None). ``name`` goes into ``missed``
    when some dict has no such key (found out for free unless ``nulls``)."""
    if not nulls:
        try:
            return list(map(itemgetter(name), values))     # in C; a missing key raises
        except KeyError:
            if missed is not None:
                missed.append(name)
    return [None if v is None else v.get(name) for v in values]


def _micros(values: list, distinct: set) -> list:
    """Microseconds since the epoch of datetimes (naive ones taken as UTC, as Arrow takes
    them), each of the ``distinct`` values converted once."""
    conv = {v: (v - (_EPOCH if v.tzinfo is None else _EPOCH_UTC)) // _US for v in distinct if v is not None}
    conv[None] = None
    return list(map(conv.__getitem__, values))
