"""Ingest raw TKG splits in the published layouts into validated Parquet.

Input layouts (one folder; ``layout="auto"`` tells them apart, ``--layout`` names one)::

    ids    train.txt valid.txt test.txt   subject<TAB>relation<TAB>object<TAB>timestamp[<TAB>extra]
           entity2id.txt relation2id.txt  name<TAB>id  (RE-NET, RE-GCN, TITer, xERTE: the id is the
                                          last field), or name<TAB>id<TAB>start<TAB>end (the YAGO and
                                          WIKI dictionaries of RE-NET/TITer/xERTE: dates after the id)
    names  train.txt valid.txt test.txt   subject<TAB>relation<TAB>object<TAB>time[<TAB>extra] with
                                          names instead of ids and no dictionaries; time an integer,
                                          a date (YYYY-MM-DD) or a date and time (YYYY-MM-DD HH:MM[:SS],
                                          ``T`` also accepted, e.g. GDELT's 15-minute steps)

Output (one folder, written atomically: it appears complete or not at all)::

    train.parquet valid.parquet test.parquet   int32 subject, relation, object, time
    entities.parquet relations.parquet          int32 id, string name
    meta.json                                   layout, counts, time step/offset, calendar, SHA-256 of every raw file

Times are normalised to ``(raw - time_offset) // time_step`` so the earliest timestamp is 0 and one
unit is one step (a day on ICEWS); ``raw = time * time_step + time_offset`` recovers the original.
Dates are first turned into days (or minutes, with a time of day) since 1970-01-01; meta.json's
``calendar`` then records the date of step 0 and the length of a step.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
import shutil
import tarfile
import tempfile
import time as _time
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from raptor.constants import ID_DTYPE, QUAD_COLUMNS, SPLITS
from raptor.common.io import atomic_dir, atomic_write_json, sha256_file
from raptor.data.registry import file_digest, missing_message

DICTIONARIES = ("entity2id.txt", "relation2id.txt")
INGEST_FORMAT_VERSION = 1
#: ``auto`` detects the layout (module docstring); ``ids`` and ``names`` force one.
LAYOUTS = ("auto", "ids", "names")
LAYOUT_HELP = (
    "ids: entity2id.txt + relation2id.txt ('name<TAB>id', or 'name<TAB>id<TAB>start<TAB>end' as in YAGO/WIKI) "
    "and integer splits 'subject<TAB>relation<TAB>object<TAB>time[<TAB>extra]' (RE-NET, RE-GCN, TITer, xERTE); "
    "names: no dictionaries, splits 'subject<TAB>relation<TAB>object<TAB>time[<TAB>extra]' with names and an "
    "integer, YYYY-MM-DD or YYYY-MM-DD HH:MM time"
)
#: A date field of the YAGO/WIKI dictionaries: ``1913-##-##``, ``2002-11-08``, ``####-##-##``, ``1``.
_DICT_DATE = re.compile(r"^[0-9#]{1,4}(-[0-9#]{1,2}){0,2}$")
#: An integer field (ASCII digits, as the Arrow reader parses them).
_DIGITS = re.compile(r"^-?[0-9]+$")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ISO_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2})?$")

#: Where the complete published datasets can be obtained, for the missing-split message.
PUBLISHED_SOURCES = (
    "the published splits are distributed with RE-NET's and RE-GCN's data releases "
    "(github.com/INK-USC/RE-Net, folder data/; github.com/Lee-zix/RE-GCN, data-release.tar.gz); "
    "pass the folder with --raw, or an archive with --url and --sha256"
)


#: Characters of a raw line (or field) an error message quotes; a longer one is cut there and its length
#: given, so that a malformed multi-megabyte line does not become a multi-megabyte message.
QUOTE_CHARS = 200
#: Range of the int64 raw values (ids and timestamps are read as int64, then stored as ID_DTYPE).
_INT64 = np.iinfo(np.int64)
_ID_MAX = int(np.iinfo(ID_DTYPE).max)


class IngestError(ValueError):
    """Invalid raw input; the message names the file (and line, where there is one)."""


def _fits_int64(text: str) -> bool:
    """Whether ``text`` is an integer that int64 holds (one of more digits than Python's int() reads
    does not)."""
    try:
        return bool(_INT64.min <= int(text) <= _INT64.max)
    except ValueError:
        return False


def quote(text: str) -> str:
    """``repr`` of ``text``, cut to :data:`QUOTE_CHARS` characters (``'abc'... (N characters)``)."""
    if len(text) <= QUOTE_CHARS:
        return repr(text)
    return f"{text[:QUOTE_CHARS]!r}... ({len(text):,} characters)"


@dataclass(frozen=True)
class IngestResult:
    out_dir: Path
    counts: dict[str, int]
    num_entities: int
    num_relations: int
    time_step: int
    time_offset: int
    seconds: float


# ------------------------------------------------------------------------------------ parsing


def _lines(path: Path) -> list[str]:
    """Decoded lines with CR/LF endings removed; trailing blank lines dropped. A UTF-8 byte-order
    mark at the start is dropped (``utf-8-sig``), as the Arrow CSV reader of the splits drops it, so
    it never ends up in the first name."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise IngestError(f"{path}: not UTF-8 text ({exc})") from None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def _is_blank(path: Path) -> bool:
    """Whether the file holds nothing but whitespace (and a byte-order mark): an empty split. Reads
    only up to the first other byte, so a real split costs one small read."""
    with open(path, "rb") as fh:
        chunk = fh.read(1 << 16)
        if chunk.startswith(b"\xef\xbb\xbf"):
            chunk = chunk[3:]
        while chunk:
            if chunk.translate(None, b" \t\r\n\x0b\x0c"):
                return False
            chunk = fh.read(1 << 16)
    return True


def _line_of_row(path: Path, row: int) -> int:
    """The line number of table row ``row`` of a split read by Arrow, which skips empty lines."""
    seen = -1
    for lineno, line in enumerate(_lines(path), start=1):
        if line:
            seen += 1
            if seen == row:
                return lineno
    return row + 1


def _dictionary_is_dated(lines: list[str]) -> bool:
    """Whether a dictionary is in the YAGO/WIKI layout ``name<TAB>id<TAB>start<TAB>end``: some line has
    four fields, an integer second field and date-like (not integer) last fields. Decided per file, so
    an end date written ``1`` does not turn one line into ``name<TAB>id``."""
    for line in lines:
        fields = [f.strip() for f in line.split("\t")]
        if (len(fields) == 4 and _is_int(fields[1]) and not _is_int(fields[3])
                and all(_DICT_DATE.match(f) for f in fields[2:])):
            return True
    return False


def read_dictionary(path: Path, kind: str) -> list[str]:
    """Names indexed by id from ``name<TAB>id`` lines (the id is the last field, so names may hold
    tabs) or ``name<TAB>id<TAB>start<TAB>end`` lines (YAGO/WIKI); ids must be exactly 0..n-1."""
    if not path.exists():
        raise IngestError(f"missing dictionary file: {path}")
    if not path.is_file():
        raise IngestError(f"{path}: not a file")
    lines = _lines(path)
    dated = _dictionary_is_dated(lines)
    names: dict[int, str] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            raise IngestError(f"{path}, line {lineno}: empty line")
        if "\t" not in line:
            raise IngestError(f"{path}, line {lineno}: expected 'name<TAB>id', got {quote(line)}")
        if dated:
            fields = line.split("\t")
            if len(fields) != 4:
                raise IngestError(f"{path}, line {lineno}: expected 'name<TAB>id<TAB>start<TAB>end' like the "
                                  f"lines before (YAGO/WIKI dictionary), got {len(fields)} fields: {quote(line)}")
            name, raw_id = fields[0], fields[1].strip()
        else:
            name, _, raw_id = line.rpartition("\t")
            raw_id = raw_id.strip()
        try:
            idx = int(raw_id)
        except ValueError:
            raise IngestError(
                f"{path}, line {lineno}: {kind} id {quote(raw_id)} is not an integer (dictionary lines are "
                f"'name<TAB>id' or 'name<TAB>id<TAB>start<TAB>end' with dates like 1913-##-##)"
            ) from None
        if idx < 0:
            raise IngestError(f"{path}, line {lineno}: negative {kind} id {quote(raw_id)}")
        if idx >= len(lines):  # ids are 0..n-1 for n lines (and then fit in ID_DTYPE)
            raise IngestError(f"{path}, line {lineno}: {kind} id {quote(raw_id)} is out of range: "
                              f"ids are 0..{len(lines) - 1} for the {len(lines)} lines of this file")
        if idx in names:
            raise IngestError(f"{path}, line {lineno}: duplicate {kind} id {idx} (also {quote(names[idx])})")
        names[idx] = name
    if not names:
        raise IngestError(f"{path}: no {kind}s")
    n = len(names)
    if max(names) != n - 1:
        missing = sorted(set(range(max(names) + 1)) - set(names))[:5]
        raise IngestError(f"{path}: {kind} ids are not contiguous 0..{n - 1} (missing e.g. {missing})")
    return [names[i] for i in range(n)]


def _is_int(text: str) -> bool:
    return text.strip().lstrip("-").isdigit()


def _diagnose_quadruples(path: Path) -> None:
    """Slow line-by-line pass that raises an IngestError naming the first bad line."""
    width = None
    for lineno, line in enumerate(_lines(path), start=1):
        if not line:  # the Arrow reader skips empty lines
            continue
        fields = [f.strip() for f in line.split("\t")]  # tabs only, as the Arrow reader splits
        if len(fields) not in (4, 5):
            hint = " (separated by spaces?)" if len(fields) == 1 and len(line.split()) in (4, 5) else ""
            raise IngestError(
                f"{path}, line {lineno}: expected 4 or 5 tab-separated fields "
                f"(subject, relation, object, timestamp[, extra]), got {len(fields)}{hint}: {quote(line)}"
            )
        if width is None:
            width = len(fields)
        elif len(fields) != width:
            raise IngestError(f"{path}, line {lineno}: {len(fields)} fields, but earlier lines have {width}")
        for name, value in zip(QUAD_COLUMNS, fields[:4]):
            if not _DIGITS.match(value):
                raise IngestError(f"{path}, line {lineno}: {name} {quote(value)} is not an integer "
                                  f"(layout ids; names in the splits are layout names: --layout names)")
            if not _fits_int64(value):
                raise IngestError(f"{path}, line {lineno}: {name} {quote(value)} does not fit in a 64-bit integer")


def _read_split(path: Path, diagnose, parse: pacsv.ParseOptions, convert: pacsv.ConvertOptions) -> pa.Table:
    """One split file as an Arrow table (columns f0, f1, ...); on a parse error ``diagnose`` names the line."""
    if not path.exists():
        raise IngestError(f"missing split file: {path}")
    if not path.is_file():
        raise IngestError(f"{path}: not a file")
    if _is_blank(path):
        raise IngestError(f"{path}: empty split file")
    try:
        return pacsv.read_csv(path, read_options=pacsv.ReadOptions(autogenerate_column_names=True),
                              parse_options=parse, convert_options=convert)
    except (pa.ArrowInvalid, pa.ArrowException):
        diagnose(path)
        raise IngestError(f"{path}: could not be parsed as tab-separated fields") from None


def read_quadruples(path: Path) -> np.ndarray:
    """int64 ``[n, 4]`` (subject, relation, object, raw timestamp) of one split file."""
    table = _read_split(path, _diagnose_quadruples, pacsv.ParseOptions(delimiter="\t"), pacsv.ConvertOptions())
    if table.num_columns not in (4, 5) or table.num_rows == 0 or any(
        not pa.types.is_integer(table.column(i).type) or table.column(i).null_count for i in range(4)
    ):
        _diagnose_quadruples(path)
        raise IngestError(f"{path}: expected 4 or 5 integer columns, got {table.num_columns} columns")
    return np.stack([table.column(i).to_numpy().astype(np.int64) for i in range(4)], axis=1)


def _diagnose_named(path: Path) -> None:
    """Line-by-line pass over a split in the names layout: raises naming the first bad line."""
    width = None
    for lineno, line in enumerate(_lines(path), start=1):
        if not line:  # the Arrow reader skips empty lines
            continue
        fields = line.split("\t")
        if len(fields) not in (4, 5):
            raise IngestError(f"{path}, line {lineno}: expected 4 or 5 tab-separated fields "
                              f"(subject, relation, object, time[, extra]), got {len(fields)}: {quote(line)}")
        if width is None:
            width = len(fields)
        elif len(fields) != width:
            raise IngestError(f"{path}, line {lineno}: {len(fields)} fields, but earlier lines have {width}")
        for name, value in zip(QUAD_COLUMNS[:3], fields[:3]):
            if not value.strip():
                raise IngestError(f"{path}, line {lineno}: empty {name} name")


def _read_named(path: Path) -> pa.Table:
    """Columns f0..f3 (subject, relation, object, time) of a names-layout split, all strings."""
    table = _read_split(path, _diagnose_named,
                        pacsv.ParseOptions(delimiter="\t", quote_char=False),  # names may hold quotes
                        pacsv.ConvertOptions(column_types={f"f{i}": pa.string() for i in range(5)},
                                             strings_can_be_null=False))
    if table.num_columns not in (4, 5) or table.num_rows == 0:
        _diagnose_named(path)
        raise IngestError(f"{path}: expected 4 or 5 columns, got {table.num_columns}")
    cols = [pc.utf8_trim_whitespace(table.column(i)) for i in range(4)]
    for i in range(3):
        empty = pc.equal(pc.utf8_length(cols[i]), 0)
        if pc.any(empty).as_py():
            _diagnose_named(path)
            raise IngestError(f"{path}: empty {QUAD_COLUMNS[i]} name")
    return pa.table(cols, names=[f"f{i}" for i in range(4)])


#: Time formats of the names layout, tried in this order: (kind, test, unit of the parsed value).
_TIME_KINDS = ("integer", "year", "date", "datetime")


def _time_kind(values: pa.ChunkedArray) -> Optional[str]:
    """Which of :data:`_TIME_KINDS` every value has (``year``: dates that are all on January 1), or None."""
    if pc.all(pc.match_substring_regex(values, r"^-?\d+$")).as_py():
        return "integer"
    if pc.all(pc.match_substring_regex(values, _ISO_DATE.pattern)).as_py():
        return "year" if pc.all(pc.ends_with(values, "-01-01")).as_py() else "date"
    if pc.all(pc.match_substring_regex(values, _ISO_DATETIME.pattern)).as_py():
        return "datetime"
    return None


def _parse_times(values: pa.ChunkedArray, kind: str, path: Path) -> np.ndarray:
    """int64 raw times: integers as they are; years; days or minutes since 1970-01-01."""
    text = values.to_numpy(zero_copy_only=False).astype(str)
    if kind == "integer":
        try:
            return text.astype(np.int64)
        except (OverflowError, ValueError):
            row = next(i for i, t in enumerate(text.tolist()) if not _fits_int64(t))
            raise IngestError(f"{path}, line {_line_of_row(path, row)}: time {quote(str(text[row]))} does not "
                              "fit in a 64-bit integer") from None
    if kind == "year":
        return np.char.partition(text, "-")[:, 0].astype(np.int64)
    unit = "D" if kind == "date" else "m"
    text = np.char.replace(text, "T", " ") if kind == "datetime" else text
    try:
        return np.array(text, dtype=f"datetime64[{unit}]").astype(np.int64)
    except ValueError as exc:  # e.g. 2014-02-30
        row = next((i for i, t in enumerate(text.tolist()) if not _is_datetime(t, unit)), None)
        where = f"{path}, line {_line_of_row(path, row)}: {quote(str(text[row]))}" if row is not None else str(path)
        raise IngestError(f"{where}: not a valid {kind}: {exc}") from None


def _is_datetime(text: str, unit: str) -> bool:
    try:
        np.datetime64(text, unit)
    except ValueError:
        return False
    return True


def read_named_splits(paths: dict[str, Path]) -> tuple[list[str], list[str], dict[str, np.ndarray], str]:
    """Read the splits of the names layout and number the names.

    Ids are given in sorted name order (entities over subjects and objects of all splits), so they do
    not depend on the order of the lines. Returns ``(entity names, relation names, {split: int64
    [n, 4] (subject, relation, object, raw time)}, time kind)``; the time kind is one of
    :data:`_TIME_KINDS` (``year``: the year; ``date``: days and ``datetime``: minutes since 1970-01-01).
    """
    tables = {s: _read_named(p) for s, p in paths.items()}
    kinds = {}
    for s, t in tables.items():
        kind = _time_kind(t.column(3))
        if kind is None:
            bad, row = _first_bad_time(t.column(3))
            raise IngestError(f"{paths[s]}, line {_line_of_row(paths[s], row)}: time {quote(bad)} is not an "
                              "integer, a date (YYYY-MM-DD) or a date and "
                              f"time (YYYY-MM-DD HH:MM[:SS]), or the file mixes them")
        kinds[s] = kind
    if len(set(kinds.values())) > 1:
        # A split whose dates all fall on January 1 next to one that does not: read all as dates.
        if set(kinds.values()) <= {"year", "date"}:
            kinds = dict.fromkeys(kinds, "date")
        else:
            raise IngestError("the splits write times differently: " +
                              ", ".join(f"{paths[s].name} {k}" for s, k in kinds.items()))
    kind = next(iter(kinds.values()))
    entity_names = _sorted_unique(pa.chunked_array([c for t in tables.values() for i in (0, 2)
                                                    for c in t.column(i).chunks]))
    relation_names = _sorted_unique(pa.chunked_array([c for t in tables.values() for c in t.column(1).chunks]))
    raw = {}
    for s, t in tables.items():
        times = _parse_times(t.column(3), kind, paths[s])
        raw[s] = np.stack([
            pc.index_in(t.column(0), value_set=entity_names).to_numpy(zero_copy_only=False).astype(np.int64),
            pc.index_in(t.column(1), value_set=relation_names).to_numpy(zero_copy_only=False).astype(np.int64),
            pc.index_in(t.column(2), value_set=entity_names).to_numpy(zero_copy_only=False).astype(np.int64),
            times,
        ], axis=1)
    return entity_names.to_pylist(), relation_names.to_pylist(), raw, kind


def _sorted_unique(values: pa.ChunkedArray) -> pa.Array:
    unique = pc.unique(values)
    return pc.take(unique, pc.array_sort_indices(unique))


def _first_bad_time(values: pa.ChunkedArray) -> tuple[str, int]:
    """The first time value that does not have the format most of the file's values have, and its row."""
    patterns = (r"^-?\d+$", _ISO_DATE.pattern, _ISO_DATETIME.pattern)
    matches = [pc.match_substring_regex(values, p) for p in patterns]
    best = max(matches, key=lambda m: pc.sum(m).as_py() or 0)
    bad = pc.indices_nonzero(pc.invert(best))
    row = bad[0].as_py() if len(bad) else 0
    return values[row].as_py(), row


def calendar_of(kind: str, time_offset: int, time_step: int) -> Optional[dict]:
    """meta.json's ``calendar`` for dated raw times: the date of step 0 and the length of one step
    (a granularity of :data:`raptor.data.names.GRANULARITIES`), or None (integer times, odd step lengths)."""
    if kind == "year":
        return {"start_date": f"{time_offset:04d}-01-01", "granularity": "year"} if time_step == 1 else None
    if kind == "date":
        start = _dt.date(1970, 1, 1) + _dt.timedelta(days=time_offset)
        return {"start_date": start.isoformat(), "granularity": "day"} if time_step == 1 else None
    if kind == "datetime":
        start = _dt.datetime(1970, 1, 1) + _dt.timedelta(minutes=time_offset)
        granularity = {15: "15min", 60: "hour", 1440: "day"}.get(time_step)
        return {"start_date": start.isoformat(timespec="minutes"), "granularity": granularity} if granularity else None
    return None


def detect_layout(raw_dir: Path, layout: str = "auto") -> str:
    """``ids`` or ``names`` for ``raw_dir`` (see the module docstring); refuses what it cannot tell."""
    if layout not in LAYOUTS:
        raise IngestError(f"unknown layout {layout!r}: expected one of {', '.join(LAYOUTS)} ({LAYOUT_HELP})")
    splits = [raw_dir / f"{s}.txt" for s in SPLITS]
    dicts = [raw_dir / d for d in DICTIONARIES]
    missing = [p for p in splits if not p.exists()]
    if layout == "ids" or (layout == "auto" and any(p.exists() for p in dicts)):
        missing += [p for p in dicts if not p.exists()]
    if missing:
        names = ", ".join(p.name for p in missing)
        raise IngestError(
            f"{raw_dir}: missing {names} ({', '.join(str(p) for p in missing)}). A dataset is ingested only "
            f"when all of {', '.join(f'{s}.txt' for s in SPLITS)} and the dictionaries are present, never "
            f"partially; {PUBLISHED_SOURCES}."
        )
    if layout != "auto":
        return layout
    if all(p.exists() for p in dicts):
        return "ids"
    first = next((line for line in _lines(splits[0]) if line.strip()), "")
    fields = first.split("\t")
    if len(fields) >= 3 and all(_is_int(f) for f in fields[:3]):
        raise IngestError(
            f"{splits[0]}, line 1: integer ids ({quote(first)}) but no {' or '.join(DICTIONARIES)} in {raw_dir}: "
            f"either the dictionaries are missing ({PUBLISHED_SOURCES}) or the names are numbers "
            f"(then say --layout names, or layout: names in the dataset's params entry). Layouts: {LAYOUT_HELP}"
        )
    return "names"


def _check_ids(path: Path, quads: np.ndarray, num_entities: int, num_relations: int) -> None:
    limits = (num_entities, num_relations, num_entities)
    dicts = ("entity2id.txt", "relation2id.txt", "entity2id.txt")
    for col, (name, limit, dic) in enumerate(zip(QUAD_COLUMNS[:3], limits, dicts)):
        bad = np.flatnonzero((quads[:, col] < 0) | (quads[:, col] >= limit))
        if bad.size:
            i = int(bad[0])
            raise IngestError(
                f"{path}, line {_line_of_row(path, i)}: {name} id {int(quads[i, col])} is not in {dic} "
                f"(ids 0..{limit - 1}); {bad.size} such line(s) in this file"
            )


def _check_temporal_order(paths: dict[str, Path], splits: dict[str, np.ndarray]) -> None:
    """Extrapolation: train ends no later than valid starts, valid no later than test starts."""
    for earlier, later in zip(SPLITS[:-1], SPLITS[1:]):
        latest = int(splits[earlier][:, 3].max())
        too_early = np.flatnonzero(splits[later][:, 3] < latest)
        if too_early.size:
            i = int(too_early[0])
            j = int(np.argmax(splits[earlier][:, 3]))
            raise IngestError(
                f"{paths[later]}, line {_line_of_row(paths[later], i)}: timestamp {int(splits[later][i, 3])} is "
                f"earlier than the latest {earlier} timestamp {latest} ({paths[earlier]}, line "
                f"{_line_of_row(paths[earlier], j)}); splits must be in temporal order "
                f"for extrapolation ({' <= '.join(SPLITS)})"
            )


def _check_time_span(paths: dict[str, Path], splits: dict[str, np.ndarray], offset: int) -> None:
    """Refuse a timestamp so far after the earliest one (``offset``) that their difference overflows int64."""
    limit = _INT64.max + offset  # a Python int; within int64 when offset < 0, the only case that can overflow
    if limit >= _INT64.max:
        return
    for s in SPLITS:
        bad = np.flatnonzero(splits[s][:, 3] > limit)
        if bad.size:
            i = int(bad[0])
            raise IngestError(f"{paths[s]}, line {_line_of_row(paths[s], i)}: timestamp {int(splits[s][i, 3])} is "
                              f"too far from the earliest timestamp {offset}: their difference does not fit in a "
                              "64-bit integer")


def _check_steps_fit(paths: dict[str, Path], splits: dict[str, np.ndarray], offset: int, step: int) -> None:
    """Refuse a timestamp whose step number ``(raw - offset) // step`` does not fit in ID_DTYPE."""
    threshold = offset + (_ID_MAX + 1) * step  # the first raw time whose step is too large (Python int)
    if threshold > _INT64.max:
        return
    for s in SPLITS:
        bad = np.flatnonzero(splits[s][:, 3] >= threshold)
        if bad.size:
            i = int(bad[0])
            t = int(splits[s][i, 3])
            raise IngestError(
                f"{paths[s]}, line {_line_of_row(paths[s], i)}: timestamp {t} is step {(t - offset) // step:,} "
                f"after the earliest timestamp {offset} (time step {step}), more than the {_ID_MAX:,} steps "
                f"{np.dtype(ID_DTYPE).name} holds")


def infer_time_step(raw_times: np.ndarray) -> int:
    """The gcd of all differences to the earliest timestamp (1 if there is only one timestamp)."""
    diffs = np.unique(raw_times - raw_times.min())
    step = 0
    for d in diffs.tolist():
        step = math.gcd(step, d)
        if step == 1:
            break
    return step or 1


# ------------------------------------------------------------------------------------ fetching


def _check_member_path(name: str, source: str) -> None:
    """Refuse an archive member whose path would land outside the extraction folder."""
    if Path(name).is_absolute() or ".." in Path(name).parts:
        raise IngestError(f"{source}: unsafe path in archive: {name}")


def extract_tar_safely(tf: tarfile.TarFile, dest: Path, source: str,
                       use_filter: bool = hasattr(tarfile, "data_filter")) -> None:
    """Extract ``tf`` into ``dest`` refusing what could write outside it: tarfile's ``data`` filter
    where this Python has it (3.11.4+, 3.12), else the same refusals by hand (absolute paths, ``..``,
    links, devices), since Python 3.11.0-3.11.3 (Debian 12's 3.11.2) have no ``filter`` argument."""
    if use_filter:
        try:
            tf.extractall(dest, filter="data")
        except tarfile.FilterError as exc:
            raise IngestError(f"{source}: unsafe member in archive: {exc}") from None
        return
    members = tf.getmembers()
    for m in members:
        _check_member_path(m.name, source)
        if not (m.isfile() or m.isdir()):
            raise IngestError(f"{source}: archive member {m.name} is not a regular file or folder "
                              "(links and devices are refused)")
    tf.extractall(dest, members=members)


def fetch_archive(url: str, sha256: str, workdir: Path) -> Path:
    """Download ``url`` (any scheme urllib knows, file:// included), check its SHA-256, unpack it.

    Returns the unpacked folder that holds ``train.txt`` (searched recursively).
    """
    archive = workdir / "archive"
    with urllib.request.urlopen(url) as resp, open(archive, "wb") as fh:  # noqa: S310 (user-given URL)
        shutil.copyfileobj(resp, fh)
    got = sha256_file(archive)
    if got.lower() != sha256.lower():
        raise IngestError(f"{url}: SHA-256 mismatch: expected {sha256}, got {got}")
    unpacked = workdir / "unpacked"
    unpacked.mkdir()
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                _check_member_path(member, url)
            zf.extractall(unpacked)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tf:
            extract_tar_safely(tf, unpacked, url)
    else:
        raise IngestError(f"{url}: not a zip or tar archive")
    found = sorted(unpacked.rglob("valid.txt"))
    if not found:
        raise IngestError(f"{url}: the archive holds no valid.txt")
    return found[0].parent


# ------------------------------------------------------------------------------------ checksums


def verify_checksums(raw_dir: Path, sums_file: Optional[Path]) -> dict[str, str]:
    """Check the raw files against a ``SHA256SUMS`` list (``sha256  relative/path`` lines).

    Without an explicit file, ``raw_dir/SHA256SUMS`` or ``raw_dir/../SHA256SUMS`` is used when it
    exists. Returns ``{file name: sha256}`` of the files that were checked.
    """
    candidates = [sums_file] if sums_file else [raw_dir / "SHA256SUMS", raw_dir.parent / "SHA256SUMS"]
    for sums in candidates:
        if sums is None or not sums.exists():
            if sums_file is not None:
                raise IngestError(f"checksum file not found: {sums_file}")
            continue
        checked = {}
        for lineno, line in enumerate(_lines(sums), start=1):
            if not line.strip():
                continue
            parts = line.split(maxsplit=1)
            if len(parts) != 2:
                raise IngestError(f"{sums}, line {lineno}: expected 'sha256  path'")
            digest, rel = parts[0], parts[1].strip().lstrip("*")
            target = (sums.parent / rel).resolve()
            if target.parent != raw_dir.resolve() or not target.exists():
                continue
            got = sha256_file(target)
            if got != digest.lower():
                raise IngestError(f"{target}: SHA-256 {got} does not match {sums}, line {lineno} ({digest})")
            checked[target.name] = got
        return checked
    return {}


def require_raw_files(name: str, raw_dir: Path, checksums: Mapping[str, str], source: Optional[str]) -> None:
    """Refuse a raw folder that lacks a release's files (``checksums`` or ``source`` given), saying
    what to download and where to put it; without a release only a missing folder is refused here
    (the split readers name a missing split)."""
    if not raw_dir.is_dir() and not checksums and not source:
        raise IngestError(f"raw data folder not found: {raw_dir}")
    wanted = list(checksums) or [f"{s}.txt" for s in SPLITS]
    missing = [f for f in wanted if not (raw_dir / f).is_file()]
    if (checksums or source) and missing:  # else the split readers say which file is missing
        raise IngestError(missing_message(name, raw_dir, missing, source))


def verify_release(name: str, raw_dir: Path, checksums: Mapping[str, str], source: Optional[str]) -> dict[str, str]:
    """Check each file of ``checksums`` (``{name: "algorithm:hex"}``) and return the checked digests."""
    checked = {}
    for fname, expected in checksums.items():
        algorithm = expected.split(":", 1)[0]
        got = file_digest(raw_dir / fname, algorithm)
        if got != expected.lower():
            raise IngestError(
                f"{raw_dir / fname}: {got} differs from the published release's {expected}"
                f"{f' ({source})' if source else ''}: another copy, or a modified file. To ingest it anyway, give it "
                f"a dataset name of its own, or set datasets.{name}.checksums: {{}} (raptor ingest: --no-verify)")
        checked[fname] = got
    return checked


# ------------------------------------------------------------------------------------ ingest


@dataclass(frozen=True)
class IngestOptions:
    """What :func:`ingest` reads besides the raw folder (:func:`dataset_options`: a ``datasets`` entry's).

    Attributes:
        time_step: raw units per step (days, or minutes for times of day); None infers it (gcd of
            timestamp differences).
        dataset: name recorded in meta.json (default: the folder's name).
        sums_file: optional SHA256SUMS file to check the raw files against (see verify_checksums).
        layout: ``auto`` (detect), ``ids`` or ``names`` (:data:`LAYOUTS`).
        checksums: raw file name -> ``sha256:<hex>`` or ``git-sha1:<hex>`` (a published release's,
            :mod:`raptor.data.registry`); each listed file must be there and match.
        source: where the files are published (named when they are missing or differ).
    """

    time_step: Optional[int] = None
    dataset: Optional[str] = None
    sums_file: Optional[str | Path] = None
    layout: str = "auto"
    checksums: Optional[Mapping[str, str]] = None
    source: Optional[str] = None


def ingest(raw_dir: str | Path, out_dir: str | Path, options: IngestOptions = IngestOptions()) -> IngestResult:
    """Validate the raw splits in ``raw_dir`` and write the Parquet dataset to ``out_dir`` atomically.

    Args:
        raw_dir: folder in one of the layouts of the module docstring.
        out_dir: output folder; replaced as a whole only when everything is valid.
        options: :class:`IngestOptions` (time step, name, checksums, layout, source).

    Raises:
        IngestError: on any invalid input; nothing is written then.
    """
    time_step, dataset, sums_file = options.time_step, options.dataset, options.sums_file
    layout, checksums, source = options.layout, options.checksums, options.source
    started = _time.perf_counter()
    raw_dir = Path(raw_dir)
    require_raw_files(dataset or raw_dir.name, raw_dir, checksums or {}, source)
    layout = detect_layout(raw_dir, layout)
    paths = {s: raw_dir / f"{s}.txt" for s in SPLITS}
    checked = verify_checksums(raw_dir, Path(sums_file) if sums_file else None)
    published = verify_release(dataset or raw_dir.name, raw_dir, checksums or {}, source)

    if layout == "ids":
        entities = read_dictionary(raw_dir / "entity2id.txt", "entity")
        relations = read_dictionary(raw_dir / "relation2id.txt", "relation")
        raw = {s: read_quadruples(p) for s, p in paths.items()}
        for s in SPLITS:
            _check_ids(paths[s], raw[s], len(entities), len(relations))
        time_kind = "integer"
        raw_files = list(paths.values()) + [raw_dir / d for d in DICTIONARIES]
    else:
        entities, relations, raw, time_kind = read_named_splits(paths)
        raw_files = list(paths.values())
    _check_temporal_order(paths, raw)

    all_times = np.concatenate([raw[s][:, 3] for s in SPLITS])
    offset = int(all_times.min())
    _check_time_span(paths, raw, offset)  # before any difference of int64 times is taken
    if time_step is None:
        step = infer_time_step(all_times)
    else:
        step = int(time_step)
        bad = np.flatnonzero((all_times - offset) % step)
        if bad.size:
            raise IngestError(f"{raw_dir}: timestamp {int(all_times[bad[0]])} is not a multiple of time_step {step} "
                              f"after subtracting the earliest timestamp {offset}")

    _check_steps_fit(paths, raw, offset, step)
    normalised = {}
    for s in SPLITS:
        q = raw[s].copy()
        q[:, 3] = (q[:, 3] - offset) // step
        if q.max() > np.iinfo(ID_DTYPE).max:
            raise IngestError(f"{paths[s]}: values do not fit in int32")
        normalised[s] = q.astype(ID_DTYPE)

    # Each raw file is hashed once: digests already taken for SHA256SUMS or the release are reused.
    known = {**checked, **{f: d.split(":", 1)[1] for f, d in published.items() if d.startswith("sha256:")}}
    file_hashes = {p.name: known.get(p.name) or sha256_file(p) for p in raw_files}

    meta = {
        "format_version": INGEST_FORMAT_VERSION,
        "dataset": dataset or raw_dir.name,
        "source": str(raw_dir),
        "layout": layout,
        "time_kind": time_kind,
        "num_entities": len(entities),
        "num_relations": len(relations),
        "counts": {s: int(len(normalised[s])) for s in SPLITS},
        "time_step": step,
        "time_offset": offset,
        "time_formula": "raw_timestamp = time * time_step + time_offset",
        "calendar": calendar_of(time_kind, offset, step),
        "num_timestamps": int(len(np.unique(all_times))),
        "time_range": {
            s: [int(normalised[s][:, 3].min()), int(normalised[s][:, 3].max())] for s in SPLITS
        },
        "duplicate_quadruples": {
            s: int(len(normalised[s]) - len(np.unique(normalised[s], axis=0))) for s in SPLITS
        },
        "sha256": file_hashes,
        "sha256_verified_against_sums": sorted(checked),
        "verified_against_release": published,
    }

    out_dir = Path(out_dir)
    with atomic_dir(out_dir, lambda d: (d / "meta.json").is_file() and (d / "train.parquet").is_file(),
                    "an ingested dataset (meta.json, train.parquet)") as tmp:
        for s in SPLITS:
            table = pa.table({c: pa.array(normalised[s][:, i], pa.int32()) for i, c in enumerate(QUAD_COLUMNS)})
            pq.write_table(table, tmp / f"{s}.parquet")
        for fname, names in (("entities.parquet", entities), ("relations.parquet", relations)):
            table = pa.table({"id": pa.array(np.arange(len(names)), pa.int32()), "name": pa.array(names, pa.string())})
            pq.write_table(table, tmp / fname)
        atomic_write_json(tmp / "meta.json", meta)
    return IngestResult(
        out_dir=out_dir,
        counts=meta["counts"],
        num_entities=len(entities),
        num_relations=len(relations),
        time_step=step,
        time_offset=offset,
        seconds=_time.perf_counter() - started,
    )


def dataset_options(name: Optional[str], d) -> IngestOptions:
    """The :class:`IngestOptions` that a ``datasets`` entry (a :class:`raptor.config.DatasetConfig`,
    registry defaults merged) sets."""
    return IngestOptions(time_step=d.time_step, dataset=name, layout=d.layout, checksums=dict(d.checksums),
                         source=d.source)


def ingest_from_url(url: str, sha256: str, out_dir: str | Path,
                    options: IngestOptions = IngestOptions()) -> IngestResult:
    """Fetch an archive, check its SHA-256, and ingest the folder in it that holds the splits."""
    if not sha256:
        raise IngestError("--url needs --sha256: downloaded data is always checked")
    with tempfile.TemporaryDirectory(prefix="raptor-fetch-") as work:
        raw_dir = fetch_archive(url, sha256, Path(work))
        return ingest(raw_dir, out_dir, options)
