"""Streaming reader for the Standard Workload Format (SWF 2.2).

An SWF file is a header of ``;`` comment lines (``; Key: value``) followed by one
job per line, 18 whitespace-separated numeric fields, ``-1`` where a value is
missing.  Files may be plain or gzipped (detected by their magic bytes, not their
name).

The reader is a generator: it holds one line at a time, so a trace of any size
streams in constant memory.  Lines are split as bytes (``int()`` accepts ASCII
bytes) because decoding every line to ``str`` costs a third of the read time.

A malformed job line raises :class:`SWFError` carrying its line and column; with
``skip_bad=True`` the line is skipped and counted in :attr:`SWFReader.bad_lines`.
"""

from __future__ import annotations

import gzip
import math
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, NamedTuple

from grid_tasks.errors import SourceError
from grid_tasks.sim.sniff import SNIFF_BYTES, binary_at

__all__ = ["SWFError", "SWFHeader", "SWFReader", "SWFRecord", "read_swf", "FIELD_NAMES"]


class SWFRecord(NamedTuple):
    """One job line: the 18 SWF fields in file order (``-1`` = missing)."""

    job_number: int
    submit_time: int
    wait_time: int
    run_time: float
    allocated_procs: int
    avg_cpu_time: float
    used_memory: float
    requested_procs: int
    requested_time: float
    requested_memory: float
    status: int
    user_id: int
    group_id: int
    executable: int
    queue: int
    partition: int
    preceding_job: int
    think_time: int


FIELD_NAMES: tuple[str, ...] = SWFRecord._fields
_N_FIELDS = len(FIELD_NAMES)
# Fields the SWF definition allows to be fractional; the others must be integers.
_FLOAT_FIELDS = frozenset({3, 5, 6, 8, 9})


class SWFError(SourceError):
    """A malformed SWF line: the message names the line, the column and why.

    The offending line itself is kept (not the whole file, which may be huge) so
    the usual caret display still works.
    """

    def __init__(self, message: str, *, source: str, line: int, column: int | None,
                 line_text: str, key: str | None = None, code: str = "BAD_SWF_LINE") -> None:
        self.line_text = line_text
        super().__init__(message, source=source, line=line, column=column, key=key,
                         code=code)

    def caret(self) -> str:
        if not self.line_text:
            return ""
        col = max(1, self.column or 1)
        return f"{self.line_text}\n{' ' * (col - 1)}^"


# Header keys whose values are numbers; the value may carry a trailing remark,
# as in ``MaxNodes: 338 (batch partition; 512 total)``.
_INT_KEYS = {
    "MaxJobs": "max_jobs", "MaxRecords": "max_records", "MaxNodes": "max_nodes",
    "MaxProcs": "max_procs", "UnixStartTime": "unix_start_time", "TimeZone": "time_zone",
    "MaxRuntime": "max_runtime", "MaxMemory": "max_memory", "MaxQueues": "max_queues",
    "MaxPartitions": "max_partitions",
}
_STR_KEYS = {
    "Version": "version", "Computer": "computer", "Installation": "installation",
    "TimeZoneString": "time_zone_string", "StartTime": "start_time", "EndTime": "end_time",
    "Preemption": "preemption", "Conversion": "conversion", "Acknowledge": "acknowledge",
}
_KEY_RE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_]*)\s*:\s?(.*)$")
# At most 19 digits: a 64-bit value, and never near int()'s 4300-digit limit.
_LEADING_INT = re.compile(r"^\s*(-?\d{1,19})(?!\d)")


@dataclass
class SWFHeader:
    """The ``;`` header comments: every ``Key: value`` pair plus typed shortcuts.

    ``fields`` maps each key to its value; a key that repeats (``Note``, ``Queue``)
    or continues on following comment lines has its parts joined by newlines.
    Typed fields are ``None`` when the header does not give them.
    """

    fields: dict[str, str] = field(default_factory=dict)
    version: str | None = None
    computer: str | None = None
    installation: str | None = None
    time_zone_string: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    preemption: str | None = None
    conversion: str | None = None
    acknowledge: str | None = None
    max_jobs: int | None = None
    max_records: int | None = None
    max_nodes: int | None = None
    max_procs: int | None = None
    unix_start_time: int | None = None
    time_zone: int | None = None
    max_runtime: int | None = None
    max_memory: int | None = None
    max_queues: int | None = None
    max_partitions: int | None = None

    def add_comment(self, text: str, last_key: str | None) -> str | None:
        """Fold one comment line (without ``;``) in; returns the key it extended."""
        match = _KEY_RE.match(text)
        if match:
            key, value = match.group(1), match.group(2).strip()
        elif last_key is not None and text.strip():
            key, value = last_key, text.strip()  # continuation of the previous key
        else:
            return None
        old = self.fields.get(key)
        self.fields[key] = value if old is None else f"{old}\n{value}"
        self._set_typed(key, value, old is None)
        return key

    def _set_typed(self, key: str, value: str, first: bool) -> None:
        if key in _INT_KEYS and first:
            number = _LEADING_INT.match(value)
            if number:
                setattr(self, _INT_KEYS[key], int(number.group(1)))
        elif key in _STR_KEYS:
            setattr(self, _STR_KEYS[key], self.fields[key])


#: What a corrupt or truncated gzip stream raises while being read.
_GZIP_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error)


def _open_binary(path: Path) -> tuple[IO[bytes], IO[bytes]]:
    """(text stream, file on disk): the same object unless gzipped."""
    raw = open(path, "rb")  # noqa: SIM115 - closed by the reader
    if raw.peek(2)[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw  # type: ignore[return-value]
    return raw, raw


class SWFReader:
    """Iterate over the job records of one SWF file, streaming.

    ``header`` is filled from the leading comment block as soon as the reader is
    created; comments found later are folded into it as they are met.  ``first``
    stops after that many job lines (comments and blank lines do not count;
    skipped bad lines do).  Use as a context manager or exhaust it to close the file.
    """

    def __init__(self, path: str | Path, *, skip_bad: bool = False,
                 first: int | None = None) -> None:
        self.path = Path(path)
        self.source = str(path)
        self.skip_bad = skip_bad
        self.first = first
        self.bad_lines = 0
        self.job_lines = 0
        self.header = SWFHeader()
        self._last_key: str | None = None
        self._lineno = 0
        self._pending: bytes | None = None
        self._file: IO[bytes] | None
        try:
            self._file, self._raw = _open_binary(self.path)
        except OSError as exc:
            raise SWFError(f"cannot open trace: {exc.strerror or exc}", source=self.source,
                           line=0, column=None, line_text="") from None
        try:
            self._refuse_binary()
            self._read_header()
            self._check_first_job()
        except SWFError:
            self.close()
            raise

    def _refuse_binary(self) -> None:
        """Binary data is refused before any line is read: it would be shown raw."""
        found = binary_at(self._sample())
        if found is not None:
            line, column, byte = found
            raise SWFError(f"not an SWF trace: binary data (byte 0x{byte:02x} at line {line}, "
                           f"column {column}); SWF is text, one job per line",
                           source=self.source, line=line, column=column, line_text="",
                           code="NOT_SWF")

    def _sample(self) -> bytes:
        """The first bytes of the (decompressed) text, without moving the reader: a
        gzip stream is inflated apart, so its errors are still met at their line."""
        head = self._raw.peek(SNIFF_BYTES)
        if self._file is self._raw:
            return head[:SNIFF_BYTES]
        try:
            return zlib.decompressobj(wbits=31).decompress(head, SNIFF_BYTES)
        except zlib.error:
            return b""  # corrupt from the start: reading the header says so

    def _check_first_job(self) -> None:
        """The first job line is checked now, before a replay asks for anything else
        (such as --procs): a file that is not a trace says so with its line."""
        if self._pending is None:
            return
        try:
            self._convert(self._pending, self._pending.split(), self._lineno)
        except SWFError as exc:
            if not self.header.fields:  # no SWF header either: not a trace at all
                raise SWFError(f"not an SWF trace: line {exc.line} is not a job line "
                               f"({exc.message}; a job line is {_N_FIELDS} numbers)",
                               source=self.source, line=exc.line or 0, column=exc.column,
                               line_text=exc.line_text, code="NOT_SWF") from None
            if not self.skip_bad:
                raise

    def _read_header(self) -> None:
        assert self._file is not None
        for raw in self._guarded(self._file):
            self._lineno += 1
            stripped = raw.strip()
            if not stripped:
                continue
            if stripped[:1] == b";":
                self._comment(stripped)
                continue
            self._pending = raw
            return

    def _comment(self, stripped: bytes) -> None:
        text = stripped[1:].decode("utf-8", "replace")
        self._last_key = self.header.add_comment(text, self._last_key)

    def __enter__(self) -> SWFReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the underlying file (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._raw.close()
            self._file = None

    @property
    def raw_position(self) -> int:
        """Bytes of the file on disk consumed so far (compressed bytes if gzipped)."""
        return self._raw.tell() if self._file is not None else self.path.stat().st_size

    def __iter__(self) -> Iterator[SWFRecord]:
        try:
            yield from self._records()
        finally:
            self.close()

    def _lines(self) -> Iterator[bytes]:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            yield pending
        if self._file is None:
            return
        try:
            for raw in self._guarded(self._file):
                self._lineno += 1
                yield raw
        except ValueError:
            if self._file is not None:
                raise
            # closed while iterating (close() or the context manager): just stop

    def _guarded(self, lines: IO[bytes]) -> Iterator[bytes]:
        """``lines``, with a corrupt or truncated gzip stream turned into SWFError."""
        try:
            # A plain loop, not ``yield from``: closing this generator early (the header
            # reader stops at the first job line) must not close the file too.
            for raw in lines:
                yield raw
        except _GZIP_ERRORS as exc:
            offset, line = self.raw_position, self._lineno + 1
            self.close()
            reason = "truncated" if isinstance(exc, EOFError) else "corrupt"
            raise SWFError(f"{reason} gzip data at line {line} (compressed byte {offset}): "
                           f"{exc}", source=self.source, line=line, column=None,
                           line_text="") from None

    def _records(self) -> Iterator[SWFRecord]:
        new = tuple.__new__
        cls = SWFRecord
        limit = self.first if self.first is not None else -1
        for raw in self._lines():
            parts = raw.split()
            if not parts:
                continue
            if parts[0][:1] == b";":
                self._comment(raw.strip())
                continue
            if self.job_lines == limit:
                return
            self.job_lines += 1
            try:
                # One unpack and 18 direct conversions: the fastest pure-Python
                # parse measured (map() plus a fallback is ~30% slower).
                (a, b, c, d, e, f, g, h, i, j, k, ll, m, n, o, p, q, r) = parts
                run, cpu, mem, req_time, req_mem = float(d), float(f), float(g), float(i), float(j)
                if (run + cpu + mem + req_time + req_mem) * 0.0:
                    raise ValueError  # nan/inf somewhere (or a sum overflow): field by field
                yield new(cls, (int(a), int(b), int(c), run, int(e), cpu, mem, int(h),
                                req_time, req_mem, int(k), int(ll), int(m), int(n), int(o),
                                int(p), int(q), int(r)))
            except ValueError:
                record = self._slow_parse(raw, parts, self._lineno)
                if record is not None:
                    yield record

    def _slow_parse(self, raw: bytes, parts: list[bytes], lineno: int) -> SWFRecord | None:
        """Parse a line the fast path refused: fractional fields, or an error."""
        try:
            return SWFRecord._make(self._convert(raw, parts, lineno))
        except SWFError:
            if self.skip_bad:
                self.bad_lines += 1
                return None
            raise

    def _convert(self, raw: bytes, parts: list[bytes], lineno: int) -> list[int | float]:
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        if len(parts) != _N_FIELDS:
            where = _column_of_field(text, min(len(parts), _N_FIELDS))
            raise SWFError(f"expected {_N_FIELDS} fields, found {len(parts)}",
                           source=self.source, line=lineno, column=where, line_text=text)
        values: list[int | float] = []
        for index, part in enumerate(parts):
            try:
                values.append(_float(part) if index in _FLOAT_FIELDS else _int_like(part))
            except ValueError:
                shown = part.decode("utf-8", "replace")
                shown = shown if len(shown) <= 40 else f"{shown[:20]}... ({len(shown)} chars)"
                raise SWFError(
                    f"field {index + 1} ({FIELD_NAMES[index]}) is not a finite number: "
                    f"{shown!r}", source=self.source, line=lineno,
                    column=_column_of_field(text, index), line_text=text,
                    key=FIELD_NAMES[index]) from None
        return values


def _float(part: bytes) -> float:
    """A fractional field: any finite number (``nan``, ``inf`` and ``1e999`` are not)."""
    value = float(part)
    if not math.isfinite(value):
        raise ValueError(part)
    return value


def _int_like(part: bytes) -> int:
    """An integer field; ``12.00`` is accepted (some converters write it) if whole."""
    try:
        return int(part)
    except ValueError:
        value = _float(part)  # also the way out for digits past int()'s limit (-> inf)
        if value != int(value):
            raise ValueError(part) from None
        return int(value)


def _column_of_field(text: str, index: int) -> int:
    """1-based column where field ``index`` starts (or just past the end)."""
    spans = [m.start() for m in re.finditer(r"\S+", text)]
    if index < len(spans):
        return spans[index] + 1
    return len(text) + 1


def read_swf(path: str | Path, *, skip_bad: bool = False,
             first: int | None = None) -> Iterator[SWFRecord]:
    """Yield the job records of an SWF file (plain or gzipped), streaming."""
    return iter(SWFReader(path, skip_bad=skip_bad, first=first))
