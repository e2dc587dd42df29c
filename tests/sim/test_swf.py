"""The SWF reader: fields, header, gzip, errors with positions, skipping, streaming."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grid_tasks.errors import SourceError
from grid_tasks.sim.swf import FIELD_NAMES, SWFError, SWFReader, SWFRecord, read_swf
from tests.sim.conftest import TRACES, swf_line, trace_path, write_swf

HEADER = [
    "Version: 2.2",
    "Computer: IBM SP2",
    "MaxJobs: 3",
    "MaxRecords: 3",
    "UnixStartTime: 893466664",
    "MaxNodes: 338 (batch partition; 512 total)",
    "MaxProcs: 128",
    "Note: first note",
    "      continued here",
    "Note: second note",
]


def test_all_eighteen_fields_in_order(tmp_path: Path) -> None:
    line = "7 100 5 3600.5 16 1.25 -1 32 7200 -1 1 42 3 9 2 1 6 30"
    path = write_swf(tmp_path / "t.swf", [line])
    (rec,) = list(read_swf(path))
    assert isinstance(rec, SWFRecord)
    assert len(FIELD_NAMES) == 18
    assert rec == (7, 100, 5, 3600.5, 16, 1.25, -1, 32, 7200, -1, 1, 42, 3, 9, 2, 1, 6, 30)
    assert rec.run_time == 3600.5 and rec.requested_procs == 32 and rec.user_id == 42
    assert rec.preceding_job == 6 and rec.think_time == 30
    assert isinstance(rec.job_number, int) and isinstance(rec.avg_cpu_time, float)


def test_header_dict_and_typed_fields(tmp_path: Path) -> None:
    path = write_swf(tmp_path / "t.swf", [swf_line(1, 0, 10, 4)], header=HEADER)
    reader = SWFReader(path)
    header = reader.header  # available before iterating
    assert header.max_procs == 128
    assert header.max_nodes == 338  # the trailing remark is ignored
    assert header.unix_start_time == 893466664
    assert header.max_jobs == 3 and header.version == "2.2" and header.computer == "IBM SP2"
    assert header.fields["MaxNodes"] == "338 (batch partition; 512 total)"
    assert header.fields["Note"] == "first note\ncontinued here\nsecond note"
    assert header.time_zone is None
    assert len(list(reader)) == 1


def test_gzip_detected_by_content_not_name(tmp_path: Path) -> None:
    lines = [swf_line(i, i * 10, 5, 1) for i in range(1, 6)]
    plain = write_swf(tmp_path / "a.swf", lines, header=HEADER)
    packed = write_swf(tmp_path / "b.data", lines, header=HEADER, gz=True)
    assert list(read_swf(plain)) == list(read_swf(packed))
    assert SWFReader(packed).header.max_procs == 128


def test_first_counts_job_lines_not_comments(tmp_path: Path) -> None:
    lines = [swf_line(1, 0, 5, 1), "; a comment in the middle", "", swf_line(2, 1, 5, 1),
             swf_line(3, 2, 5, 1)]
    path = write_swf(tmp_path / "t.swf", lines, header=HEADER)
    assert [r.job_number for r in read_swf(path, first=2)] == [1, 2]


def test_bad_field_reports_line_column_and_field(tmp_path: Path) -> None:
    lines = [swf_line(1, 0, 5, 1), "2 10 -1 abc 4 -1 -1 -1 -1 -1 1 1 1 -1 1 -1 -1 -1"]
    path = write_swf(tmp_path / "t.swf", lines, header=["MaxProcs: 8"])
    with pytest.raises(SWFError) as info:
        list(read_swf(path))
    err = info.value
    assert isinstance(err, SourceError)
    assert err.line == 3  # one header line, then the second job line
    assert err.column == lines[1].index("abc") + 1
    assert err.key == "run_time"
    assert "field 4" in err.message and "abc" in err.message
    assert err.caret().splitlines() == [lines[1], " " * lines[1].index("abc") + "^"]
    assert str(path) in str(err)


def test_wrong_field_count_is_an_error(tmp_path: Path) -> None:
    path = write_swf(tmp_path / "t.swf", ["1 2 3"])
    with pytest.raises(SWFError, match="expected 18 fields, found 3") as info:
        list(read_swf(path))
    assert info.value.line == 1
    assert info.value.column == len("1 2 3") + 1


def test_fractional_integer_field_is_refused(tmp_path: Path) -> None:
    path = write_swf(tmp_path / "t.swf", ["1 0 -1 10 4.5 -1 -1 -1 -1 -1 1 1 1 -1 1 -1 -1 -1"])
    with pytest.raises(SWFError, match="allocated_procs"):
        list(read_swf(path))


def test_whole_float_in_integer_field_is_accepted(tmp_path: Path) -> None:
    path = write_swf(tmp_path / "t.swf", ["1 0 -1 10 4.00 -1 -1 -1 -1 -1 1 1 1 -1 1 -1 -1 -1"])
    (rec,) = list(read_swf(path))
    assert rec.allocated_procs == 4 and isinstance(rec.allocated_procs, int)


def test_skip_bad_skips_and_counts(tmp_path: Path) -> None:
    lines = [swf_line(1, 0, 5, 1), "garbage", swf_line(3, 2, 5, 1), "4 5 6 x"]
    path = write_swf(tmp_path / "t.swf", lines)
    reader = SWFReader(path, skip_bad=True)
    assert [r.job_number for r in reader] == [1, 3]
    assert reader.bad_lines == 2 and reader.job_lines == 4


def test_missing_file_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(SWFError, match="cannot open trace"):
        SWFReader(tmp_path / "nope.swf")


def test_reader_streams_lazily(tmp_path: Path) -> None:
    """Taking one record reads only the start of a big gzipped file."""
    path = tmp_path / "big.swf.gz"
    with gzip.open(path, "wt", compresslevel=1) as out:
        out.write("".join(swf_line(i, i, 5, 1) + "\n" for i in range(1, 60_001)))
    reader = SWFReader(path)
    records = iter(reader)
    assert next(records).job_number == 1
    assert next(records).job_number == 2
    assert reader.raw_position < path.stat().st_size / 4  # far from the end: nothing slurped
    reader.close()
    assert list(records) == []


record_values = st.tuples(
    st.integers(1, 10**9), st.integers(0, 10**9), st.integers(-1, 10**7),
    st.integers(-1, 10**7), st.integers(-1, 4096), st.integers(-1, 10**7),
    st.integers(-1, 10**6), st.integers(-1, 4096), st.integers(-1, 10**7),
    st.integers(-1, 10**6), st.integers(-1, 5), *[st.integers(-1, 10**5)] * 7)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(record_values, min_size=1, max_size=20), st.booleans())
def test_written_records_read_back(tmp_path: Path, rows: list[tuple[int, ...]], gz: bool) -> None:
    lines = ["  ".join(str(v) for v in row) for row in rows]
    path = write_swf(tmp_path / "p.swf", lines, header=["MaxProcs: 4"], gz=gz)
    assert [tuple(r) for r in read_swf(path)] == [tuple(float(v) if i in (3, 5, 6, 8, 9) else v
                                                       for i, v in enumerate(row)) for row in rows]


def test_shared_trace_reads_completely() -> None:
    path = trace_path("KTH-SP2")
    reader = SWFReader(path)
    records = list(reader)
    assert len(records) == 28_476  # the README's count: nothing truncated
    assert reader.header.max_procs == TRACES["KTH-SP2"][1]
    assert reader.bad_lines == 0
    submits = [r.submit_time for r in records]
    assert submits == sorted(submits)


# --- corrupt gzip and hostile header numbers ---------------------------------------

def _gz_trace(tmp_path: Path, jobs: int) -> tuple[Path, bytes]:
    path = write_swf(tmp_path / "full.swf.gz", [swf_line(i, i, 5, 1) for i in range(1, jobs + 1)],
                     header=HEADER, gz=True)
    return path, path.read_bytes()


def test_truncated_gzip_yields_what_it_can_then_a_located_error(tmp_path: Path) -> None:
    _, data = _gz_trace(tmp_path, 20_000)
    cut = tmp_path / "cut.swf.gz"
    cut.write_bytes(data[: len(data) // 2])
    reader = SWFReader(cut, skip_bad=True)  # corruption is not a bad line: never skipped
    seen = []
    with pytest.raises(SWFError) as info:
        for rec in reader:
            seen.append(rec.job_number)
    err = info.value
    assert seen == list(range(1, len(seen) + 1)) and 1000 < len(seen) < 20_000
    assert err.line == len(HEADER) + len(seen) + 1  # the line it was reading
    assert err.line is not None and err.column is None
    assert "truncated gzip data" in err.message
    assert f"compressed byte {len(data) // 2}" in err.message
    assert err.pretty() == str(err)  # no caret under a line that was never read
    assert reader.bad_lines == 0 and reader._file is None  # closed on the way out


def test_corrupt_gzip_header_fails_when_opened(tmp_path: Path) -> None:
    bad = tmp_path / "bad.swf"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 40)
    with pytest.raises(SWFError) as info:
        SWFReader(bad)
    assert info.value.line == 1 and "gzip data at line 1" in info.value.message
    assert info.value.source == str(bad)


def test_corrupt_deflate_stream_is_an_swf_error(tmp_path: Path) -> None:
    _, data = _gz_trace(tmp_path, 3000)
    mangled = tmp_path / "mangled.swf.gz"
    mangled.write_bytes(data[:300] + bytes(b ^ 0x5A for b in data[300:400]) + data[400:])
    with pytest.raises(SWFError, match="corrupt gzip data|truncated gzip data"):
        list(read_swf(mangled))


def test_garbage_after_a_complete_member_is_reported_after_the_last_line(tmp_path: Path) -> None:
    _, data = _gz_trace(tmp_path, 10)
    tail = tmp_path / "tail.swf.gz"
    tail.write_bytes(data + b"not gzip")
    reader = SWFReader(tail)
    records = []
    with pytest.raises(SWFError, match="corrupt gzip data") as info:
        records.extend(reader)
    assert len(records) == 10 and info.value.line == len(HEADER) + 11


@pytest.mark.parametrize("value", ["9" * 4301, "9" * 20])
def test_header_number_past_64_bits_is_kept_as_text_only(tmp_path: Path, value: str) -> None:
    path = write_swf(tmp_path / "t.swf", [swf_line(1, 0, 10, 4)],
                     header=[f"MaxProcs: {value}", "MaxNodes: 9223372036854775807"])
    reader = SWFReader(path)
    assert reader.header.max_procs is None and reader.header.fields["MaxProcs"] == value
    assert reader.header.max_nodes == 2**63 - 1
    assert len(list(reader)) == 1


@pytest.mark.parametrize(("field", "value"), [(3, "1e999"), (5, "nan"), (8, "-inf"), (0, "inf"),
                                              (4, "9" * 4301)])
def test_non_finite_numbers_are_refused_with_their_field(tmp_path: Path, field: int,
                                                         value: str) -> None:
    parts = swf_line(1, 0, 10, 4).split()
    parts[field] = value
    path = write_swf(tmp_path / "t.swf", [swf_line(1, 0, 10, 4), " ".join(parts)])
    reader = SWFReader(path)
    with pytest.raises(SWFError) as info:
        list(reader)
    err = info.value
    assert (err.line, err.key) == (2, FIELD_NAMES[field])
    assert err.column == " ".join(parts).index(value) + 1
    assert "not a finite number" in err.message and len(err.message) < 200


def test_large_finite_fractional_fields_still_read(tmp_path: Path) -> None:
    # their sum overflows to inf: the fast path defers to the field-by-field check
    parts = swf_line(1, 0, 10, 4).split()
    parts[3] = parts[5] = "1e308"
    path = write_swf(tmp_path / "t.swf", [" ".join(parts)])
    (rec,) = list(read_swf(path))
    assert rec.run_time == rec.avg_cpu_time == 1e308


# --- files that are not SWF traces are told apart when opened --------------------------

def test_binary_file_is_not_an_swf_trace(tmp_path: Path) -> None:
    path = tmp_path / "a.out"
    path.write_bytes(b"; Version: 2.2\n1 2 3\x00\x01\x02 binary" + bytes(range(256)) * 20)
    with pytest.raises(SWFError) as info:
        SWFReader(path)
    err = info.value
    assert err.code == "NOT_SWF" and (err.line, err.column) == (2, 6)
    assert "not an SWF trace: binary data (byte 0x00" in err.message
    assert "\x00" not in err.pretty() and err.pretty() == str(err)  # no raw bytes shown


def test_text_without_header_whose_first_line_is_no_job_is_not_a_trace(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text("\n# jobs\njob,submit,wait\n1,2,3\n")
    for skip_bad in (False, True):  # --skip-bad would otherwise skip the whole file
        with pytest.raises(SWFError) as info:
            SWFReader(path, skip_bad=skip_bad)
        assert info.value.code == "NOT_SWF" and info.value.line == 2
        assert "not an SWF trace: line 2 is not a job line" in info.value.message


def test_a_bad_first_job_line_of_a_real_trace_is_reported_when_opened(tmp_path: Path) -> None:
    path = write_swf(tmp_path / "t.swf", ["1 2 3", swf_line(2, 10, 5, 1)], header=HEADER)
    with pytest.raises(SWFError) as info:
        SWFReader(path)
    assert info.value.code == "BAD_SWF_LINE" and info.value.line == len(HEADER) + 1
    reader = SWFReader(path, skip_bad=True)  # with its header it is a trace: skip the line
    assert [r.job_number for r in reader] == [2] and reader.bad_lines == 1


def test_latin1_header_text_is_still_text(tmp_path: Path) -> None:
    path = tmp_path / "t.swf"
    path.write_bytes(b"; Installation: Universit\xe9\n" + swf_line(1, 0, 5, 1).encode() + b"\n")
    assert [r.job_number for r in SWFReader(path)] == [1]


def test_gzipped_binary_is_not_an_swf_trace(tmp_path: Path) -> None:
    path = tmp_path / "core.gz"
    path.write_bytes(gzip.compress(b"\x00\x01ELF" + bytes(range(256)) * 40))
    with pytest.raises(SWFError) as info:
        SWFReader(path)
    assert info.value.code == "NOT_SWF" and (info.value.line, info.value.column) == (1, 1)
