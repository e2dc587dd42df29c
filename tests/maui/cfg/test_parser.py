"""Reading maui.cfg text: forms, defaults, warnings and located errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from grid_tasks.errors import GridTasksError, NotFoundError, SourceError
from grid_tasks.maui.cfg import (
    INFINITY,
    PARAMETERS,
    FairshareTarget,
    MauiConfigError,
    load_maui_config,
    parse_maui_config,
)

SAMPLE = Path(__file__).resolve().parents[3] / "config" / "maui.cfg"


def error_of(text: str) -> MauiConfigError:
    with pytest.raises(MauiConfigError) as info:
        parse_maui_config(text, source="t.cfg")
    return info.value


# --- plain parameters and defaults --------------------------------------------------


def test_defaults_when_unset_are_mauis() -> None:
    cfg = parse_maui_config("")
    assert cfg.get("RMPOLLINTERVAL") == 60
    assert cfg.get("RESERVATIONDEPTH") == 1
    assert cfg.get("RESERVATIONPOLICY") == "CURRENTHIGHEST"
    assert cfg.get("BACKFILLPOLICY") == "FIRSTFIT"
    assert cfg.get("NODEALLOCATIONPOLICY") == "LASTAVAILABLE"
    assert cfg.get("NODEAVAILABILITYPOLICY") == {"DEFAULT": "COMBINED"}
    assert cfg.get("QUEUETIMEWEIGHT") == 1 and cfg.get("XFACTORWEIGHT") == 0
    assert cfg.get("FSPOLICY") == "NONE" and cfg.get("FSDEPTH") == 8
    assert cfg.get("FSINTERVAL") == 12 * 3600 and cfg.get("FSDECAY") == 1.0
    assert cfg.get("DEFERTIME") == 3600 and cfg.get("DEFERCOUNT") == 24
    assert cfg.get("LOGFILEROLLDEPTH") == 1
    assert cfg.modules == ()
    assert not cfg.is_set("RMPOLLINTERVAL")
    assert cfg.warnings == []


def test_every_default_is_a_value_its_type_accepts() -> None:
    # The schema's defaults must be what reading the default's text would give.
    for param in PARAMETERS.values():
        text = param.type.format(param.default)
        if text == "":
            continue  # empty lists/strings cannot be written, they are only defaults
        assert param.type.parse(text) == param.default, param.name


def test_typed_values_of_each_kind() -> None:
    cfg = parse_maui_config(
        "RMPOLLINTERVAL 00:00:30\n"
        "RESERVATIONDEPTH 8\n"
        "FSDECAY 0.5\n"
        "ENABLENEGJOBPRIORITY TRUE\n"
        "BACKFILLPOLICY bestfit\n"
        "ADMIN1 root alice bob\n"
        "LOGFILE /var/log/maui.log\n"
        "JOBMAXSTARTTIME INFINITY\n"
        "MAXJOBPERUSERCOUNT 4,8\n"
        "MODULES grid_tasks.maui.modules:Checker, other.mod:Profiler\n"
    )
    assert cfg.get("RMPOLLINTERVAL") == 30
    assert cfg.get("RESERVATIONDEPTH") == 8
    assert cfg.get("FSDECAY") == 0.5
    assert cfg.get("ENABLENEGJOBPRIORITY") is True
    assert cfg.get("BACKFILLPOLICY") == "BESTFIT"
    assert cfg.get("ADMIN1") == ("root", "alice", "bob")
    assert cfg.get("LOGFILE") == "/var/log/maui.log"
    assert cfg.get("JOBMAXSTARTTIME") == INFINITY
    assert cfg.get("MAXJOBPERUSERCOUNT") == (4, 8)
    assert cfg.modules == ("grid_tasks.maui.modules:Checker", "other.mod:Profiler")
    assert cfg.is_set("rmpollinterval")


def test_names_are_case_insensitive_in_the_api() -> None:
    cfg = parse_maui_config("BACKFILLDEPTH 5\n")
    assert cfg.get("backfilldepth") == cfg.get("BackFillDepth") == 5


def test_lower_case_name_in_file_is_read_with_a_warning() -> None:
    cfg = parse_maui_config("# x\nrmpollinterval 10\n", source="t.cfg")
    assert cfg.get("RMPOLLINTERVAL") == 10
    (warning,) = cfg.warnings
    assert (warning.source, warning.line, warning.column) == ("t.cfg", 2, 1)
    assert "case-sensitively" in warning.message


def test_aliases() -> None:
    cfg = parse_maui_config("RESOURCEAVAILABILITYPOLICY DEDICATED\nUFSWEIGHT 7\n")
    assert cfg.get("NODEAVAILABILITYPOLICY") == {"DEFAULT": "DEDICATED"}
    assert cfg.get("RESOURCEAVAILABILITYPOLICY") == {"DEFAULT": "DEDICATED"}
    assert cfg.get("FSUSERWEIGHT") == 7
    assert cfg.warnings == []
    cfg = parse_maui_config("SERVWEIGHT 3\nQUEUECFG[batch] PRIORITY=5\n")
    assert cfg.get("SERVICEWEIGHT") == 3
    assert cfg.credentials("CLASS") == {"batch": {"PRIORITY": 5}}


def test_equals_between_name_and_value() -> None:
    cfg = parse_maui_config("RMPOLLINTERVAL=45\nRESERVATIONDEPTH = 3\n")
    assert cfg.get("RMPOLLINTERVAL") == 45 and cfg.get("RESERVATIONDEPTH") == 3


def test_comments_anywhere_and_continuation_lines() -> None:
    text = (
        "# header comment\n"
        "   \n"
        "ADMIN1 root \\\n"
        "       alice   # trailing comment\n"
        "RMPOLLINTERVAL 20#no space needed\n"
    )
    cfg = parse_maui_config(text)
    assert cfg.get("ADMIN1") == ("root", "alice")
    assert cfg.get("RMPOLLINTERVAL") == 20
    assert cfg.where("RMPOLLINTERVAL") == (5, 16)


def test_value_may_start_with_a_bracket_after_a_space() -> None:
    cfg = parse_maui_config("DEFAULTCLASSLIST [batch:1]\n")
    assert cfg.get("DEFAULTCLASSLIST") == ("[batch:1]",)


def test_quoted_value() -> None:
    cfg = parse_maui_config('LOGFILE "my log.txt"\n')
    assert cfg.get("LOGFILE") == "my log.txt"


def test_crlf_and_no_final_newline() -> None:
    cfg = parse_maui_config("RMPOLLINTERVAL 5\r\nFSDEPTH 3")
    assert cfg.get("RMPOLLINTERVAL") == 5 and cfg.get("FSDEPTH") == 3


def test_repeated_parameter_last_wins_with_warning() -> None:
    cfg = parse_maui_config("FSDEPTH 3\nFSDEPTH 4\n")
    assert cfg.get("FSDEPTH") == 4
    (warning,) = cfg.warnings
    assert warning.line == 2 and "overrides line 1" in warning.message


def test_indexed_plain_parameter_falls_back_to_global() -> None:
    cfg = parse_maui_config("BACKFILLPOLICY BESTFIT\nBACKFILLPOLICY[fast] GREEDY\n")
    assert cfg.get("BACKFILLPOLICY", index="fast") == "GREEDY"
    assert cfg.get("BACKFILLPOLICY", index="other") == "BESTFIT"
    assert cfg.get("BACKFILLPOLICY") == "BESTFIT"
    assert cfg.is_set("BACKFILLPOLICY", index="fast")
    assert not cfg.is_set("BACKFILLPOLICY", index="other")


def test_unknown_parameter_warns_and_keeps_the_rest() -> None:
    cfg = parse_maui_config("RMPOLLINTERVAL 5\n  BACKFILPOLICY BESTFIT\nFSDEPTH 2\n", "t.cfg")
    assert cfg.get("RMPOLLINTERVAL") == 5 and cfg.get("FSDEPTH") == 2
    (warning,) = cfg.warnings
    assert (warning.line, warning.column) == (2, 3)
    assert "BACKFILPOLICY" in warning.message and "BACKFILLPOLICY" in warning.message
    assert str(warning).startswith("t.cfg:2:3: warning:")


def test_asking_for_an_unknown_parameter_is_a_typed_error() -> None:
    with pytest.raises(NotFoundError):
        parse_maui_config("").get("NOSUCHPARAM")
    with pytest.raises(NotFoundError):
        parse_maui_config("").credentials("PROJECT")


# --- NAME[object] KEY=VALUE forms -----------------------------------------------------


def test_credentials_of_every_kind() -> None:
    cfg = parse_maui_config(
        "USERCFG[ann] PRIORITY=100 MAXJOB=4,8 FSTARGET=25+ QLIST=a:b QDEF=a MAXWC=2:00:00\n"
        "GROUPCFG[phys] MAXPROC=16 FSTARGET=30-\n"
        "ACCOUNTCFG[px] MAXPS=36000 ALIST=px,py ADEF=px\n"
        "CLASSCFG[batch] MAXNODE=4 MAXPROCPERJOB=8 DEFAULT.WCLIMIT=1:00:00\n"
        "QOSCFG[high] PRIORITY=1000 QFLAGS=PREEMPTOR,IGNUSER XFTARGET=2.5 QTTARGET=10:00\n"
    )
    ann = cfg.credentials("USER")["ann"]
    assert ann == {"PRIORITY": 100, "MAXJOB": (4, 8), "FSTARGET": FairshareTarget(25.0, "FLOOR"),
                   "QLIST": ("a", "b"), "QDEF": "a", "MAXWC": 7200}
    assert cfg.credentials("group")["phys"] == {
        "MAXPROC": (16, 16), "FSTARGET": FairshareTarget(30.0, "CEILING")}
    assert cfg.credentials("ACCOUNTCFG")["px"]["ALIST"] == ("px", "py")
    assert cfg.credentials("CLASS")["batch"]["DEFAULT.WCLIMIT"] == 3600
    assert cfg.credentials("QOS")["high"]["QFLAGS"] == ("PREEMPTOR", "IGNUSER")
    assert cfg.credentials("QOS")["high"]["QTTARGET"] == 600


def test_credential_merges_default_entry() -> None:
    cfg = parse_maui_config("USERCFG[DEFAULT] MAXJOB=2 MAXPROC=8\nUSERCFG[ann] MAXJOB=5\n")
    assert cfg.credential("USER", "ann") == {"MAXJOB": (5, 5), "MAXPROC": (8, 8)}
    assert cfg.credential("USER", "bob") == {"MAXJOB": (2, 2), "MAXPROC": (8, 8)}


def test_repeated_object_lines_merge() -> None:
    cfg = parse_maui_config("USERCFG[a] MAXJOB=1\nUSERCFG[a] PRIORITY=3\n")
    assert cfg.credentials("USER")["a"] == {"MAXJOB": (1, 1), "PRIORITY": 3}


def test_returned_tables_are_copies() -> None:
    cfg = parse_maui_config("NODECFG[n1] PROCS=4\n")
    cfg.node_configs["n1"]["PROCS"] = 99
    cfg.get("NODEAVAILABILITYPOLICY")["PROCS"] = "UTILIZED"
    assert cfg.node_configs["n1"]["PROCS"] == 4
    assert cfg.get("NODEAVAILABILITYPOLICY") == {"DEFAULT": "COMBINED"}


def test_standing_reservation_keys_and_defaults() -> None:
    cfg = parse_maui_config(
        "SRCFG[night] STARTTIME=18:00:00 ENDTIME=06:00:00 DAYS=Mon,Tue PERIOD=day \\\n"
        "  TASKCOUNT=4 RESOURCES=PROCS:2;MEM:512 HOSTLIST=n1,n2 USERLIST=a,b GROUPLIST=g \\\n"
        "  ACCOUNTLIST=x CLASSLIST=batch QOSLIST=high FLAGS=byname,spaceflex DEPTH=3\n"
    )
    sr = cfg.standing_reservations["night"]
    assert sr["STARTTIME"] == 18 * 3600 and sr["ENDTIME"] == 6 * 3600
    assert sr["DAYS"] == ("MON", "TUE") and sr["PERIOD"] == "DAY"
    assert sr["TASKCOUNT"] == 4 and sr["RESOURCES"] == {"PROCS": 2, "MEM": 512}
    assert sr["HOSTLIST"] == ("n1", "n2") and sr["USERLIST"] == ("a", "b")
    assert sr["GROUPLIST"] == ("g",) and sr["ACCOUNTLIST"] == ("x",)
    assert sr["CLASSLIST"] == ("batch",) and sr["QOSLIST"] == ("high",)
    assert sr["FLAGS"] == ("BYNAME", "SPACEFLEX") and sr["DEPTH"] == 3
    assert sr["ACCESS"] == "DEDICATED" and sr["PRIORITY"] == 0  # Maui's defaults


def test_legacy_indexed_standing_reservation_parameters() -> None:
    cfg = parse_maui_config(
        "SRNAME[0] debug\nSRHOSTLIST[0] n1 n2\nSRSTARTTIME[0] 8:00:00\nSRTASKCOUNT[1] 2\n"
    )
    srs = cfg.standing_reservations
    assert srs["debug"]["HOSTLIST"] == ("n1", "n2")
    assert srs["debug"]["STARTTIME"] == 8 * 3600
    assert srs["1"]["TASKCOUNT"] == 2


def test_node_and_rm_configs() -> None:
    cfg = parse_maui_config(
        "NODECFG[DEFAULT] SPEED=1.0 PRIORITY=1\n"
        "NODECFG[n1] PROCS=8 MEMORY=4096 FEATURES=fast:ib SPEED=2.5 MAXLOAD=3.5\n"
        "RMCFG[rmA] TYPE=gridtasks HOST=head PORT=15004 TIMEOUT=00:30\n"
    )
    assert cfg.node_configs["n1"] == {"PROCS": 8, "MEMORY": 4096, "FEATURES": ("fast", "ib"),
                                      "SPEED": 2.5, "MAXLOAD": 3.5}
    assert cfg.node_config("n1")["PRIORITY"] == 1 and cfg.node_config("n1")["SPEED"] == 2.5
    assert cfg.node_config("n9") == {"SPEED": 1.0, "PRIORITY": 1}
    assert cfg.resource_managers["rmA"] == {"TYPE": "GRIDTASKS", "HOST": "head",
                                            "PORT": 15004, "TIMEOUT": 30}


def test_unknown_key_warns_with_its_column_and_keeps_the_others() -> None:
    cfg = parse_maui_config("USERCFG[a] MAXJOB=2 MAXJOBS=3 PRIORITY=1\n", "t.cfg")
    assert cfg.credentials("USER")["a"] == {"MAXJOB": (2, 2), "PRIORITY": 1}
    (warning,) = cfg.warnings
    assert (warning.line, warning.column) == (1, 21)
    assert "MAXJOBS" in warning.message and "did you mean MAXJOB" in warning.message


def test_spaces_inside_the_brackets_are_allowed_as_in_maui() -> None:
    cfg = parse_maui_config("USERCFG[ ann ] MAXJOB=3\n")
    assert cfg.credentials("USER") == {"ann": {"MAXJOB": (3, 3)}}


def test_object_keys_are_case_insensitive() -> None:
    cfg = parse_maui_config("USERCFG[Ann] maxjob=3\n")
    assert cfg.credentials("USER") == {"Ann": {"MAXJOB": (3, 3)}}


# --- errors: typed, with line and column of the value ---------------------------------


@pytest.mark.parametrize(
    ("text", "line", "column", "key"),
    [
        ("RMPOLLINTERVAL abc\n", 1, 16, "RMPOLLINTERVAL"),
        ("# c\nRMPOLLINTERVAL 1:xx\n", 2, 18, "RMPOLLINTERVAL"),
        ("BACKFILLPOLICY WORSTFIT\n", 1, 16, "BACKFILLPOLICY"),
        ("RESERVATIONDEPTH -1\n", 1, 18, "RESERVATIONDEPTH"),
        ("RESERVATIONDEPTH 1 2\n", 1, 20, "RESERVATIONDEPTH"),
        ("FSDECAY x\n", 1, 9, "FSDECAY"),
        ("ENABLENEGJOBPRIORITY maybe\n", 1, 22, "ENABLENEGJOBPRIORITY"),
        ("JOBNODEMATCHPOLICY EXACTNODE BOGUS\n", 1, 30, "JOBNODEMATCHPOLICY"),
        ("NODEAVAILABILITYPOLICY DEDICATED:GPU\n", 1, 34, "NODEAVAILABILITYPOLICY"),
        ("USERCFG[a] MAXJOB=4,x\n", 1, 21, "MAXJOB"),
        ("USERCFG[a] PRIORITY=1 \\\n  FSTARGET=200\n", 2, 12, "FSTARGET"),
        ("SRCFG[s] RESOURCES=PROCS:2;MEM:x\n", 1, 32, "RESOURCES"),
        ("SRCFG[s] DAYS=Mon,Funday\n", 1, 19, "DAYS"),
        ("NODECFG[n] PROCS=four\n", 1, 18, "PROCS"),
        ("QOSCFG[q] QFLAGS=PREEMPTOR,FAST\n", 1, 28, "QFLAGS"),
    ],
)
def test_wrong_values_are_errors_at_the_value(text: str, line: int, column: int,
                                              key: str) -> None:
    exc = error_of(text)
    assert isinstance(exc, SourceError) and isinstance(exc, GridTasksError)
    assert (exc.source, exc.line, exc.column, exc.key) == ("t.cfg", line, column, key)
    assert exc.pretty().splitlines()[-1] == " " * (column - 1) + "^"


@pytest.mark.parametrize(
    ("text", "line", "column", "code"),
    [
        ("RMPOLLINTERVAL\n", 1, 15, "MISSING_VALUE"),
        ("USERCFG[a] MAXJOB=\n", 1, 19, "MISSING_VALUE"),
        ("USERCFG MAXJOB=3\n", 1, 8, "MISSING_INDEX"),
        ("USERCFG[] MAXJOB=3\n", 1, 8, "MISSING_INDEX"),
        ("SRHOSTLIST n1\n", 1, 11, "MISSING_INDEX"),
        ("USERCFG[a] MAXJOB=1 fast\n", 1, 21, "EXPECTED_PAIR"),
        ("123 x\n", 1, 1, "SYNTAX"),
        ("FSDEPTH 2\n  = 3\n", 2, 3, "SYNTAX"),
        ('LOGFILE "unterminated\n', 1, 9, "SYNTAX"),
        ("ADMIN1 a\\b\n", 1, 9, "SYNTAX"),
        ("USERCFG[a b] MAXJOB=1\n", 1, 8, "BAD_INDEX"),
        ("QOSWEIGHT[ 1 2] 3\n", 1, 10, "BAD_INDEX"),
    ],
)
def test_malformed_lines_are_located_errors(text: str, line: int, column: int,
                                            code: str) -> None:
    exc = error_of(text)
    assert (exc.line, exc.column, exc.code) == (line, column, code)
    assert exc.to_dict()["line"] == line


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("ADMIN1 a\\b\n", "backslash must end the line"),
        ('LOGFILE "x\n', "unterminated quoted string"),
        ("FSDEPTH 2\n%x 1\n", "expected a parameter name, got '%x'"),
        ("FSDEPTH 2\n9x 1\n", "expected a parameter name, got '9x'"),
        ("FSDEPTH = = 2\n", "unexpected '='"),
    ],
)
def test_syntax_errors_say_what_is_wrong(text: str, fragment: str) -> None:
    assert fragment in error_of(text).message


def test_error_message_names_key_and_reason() -> None:
    exc = error_of("USERCFG[a] MAXJOB=8,4\n")
    assert "MAXJOB" in str(exc) and "below soft limit" in str(exc)


# --- files ----------------------------------------------------------------------------


def test_load_missing_file_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(MauiConfigError) as info:
        load_maui_config(tmp_path / "nope.cfg")
    assert info.value.code == "UNREADABLE"


def test_load_reports_the_file_name(tmp_path: Path) -> None:
    path = tmp_path / "maui.cfg"
    path.write_text("FSDEPTH 3\nFSDEPTH x\n")
    with pytest.raises(MauiConfigError) as info:
        load_maui_config(path)
    assert info.value.source == str(path) and info.value.line == 2


def test_sample_config_reads_cleanly() -> None:
    cfg = load_maui_config(SAMPLE)
    assert cfg.warnings == []
    assert cfg.get("RESERVATIONDEPTH") == 4 and cfg.get("BACKFILLPOLICY") == "BESTFIT"
    assert cfg.get("FSPOLICY") == "DEDICATEDPS"
    assert cfg.credential("USER", "alice")["FSTARGET"] == FairshareTarget(25.0, "FLOOR")
    assert cfg.credential("USER", "carol")["MAXJOB"] == (8, 12)
    sr = cfg.standing_reservations["interactive"]
    assert sr["HOSTLIST"] == ("node1",) and sr["STARTTIME"] == 8 * 3600
    assert cfg.node_config("node1")["FEATURES"] == ("fast", "ib")
    data = cfg.to_dict()
    assert data["parameters"]["RMPOLLINTERVAL"] == 30
    assert data["credentials"]["USER"]["alice"]["FSTARGET"] == {"percent": 25.0,
                                                                 "mode": "FLOOR"}


def test_every_shipped_config_reads_without_warnings() -> None:
    files = sorted(SAMPLE.parent.glob("maui*.cfg"))
    assert SAMPLE in files and len(files) >= 4
    depths = {}
    for path in files:
        cfg = load_maui_config(path)
        assert cfg.warnings == [], path
        depths[path.name] = cfg.get("RESERVATIONDEPTH")
    assert depths["maui-fcfs.cfg"] == 0 and depths["maui-easy.cfg"] == 1
    assert depths["maui-conservative.cfg"] > 10000


def test_object_keys_keep_their_line_and_column() -> None:
    """Reports about a credential's limit cite the KEY=VALUE that set it (last one wins;
    ignored keys and aliases resolved)."""
    cfg = parse_maui_config("USERCFG[DEFAULT] MAXJOB=4 \\\n    MAXPROC=16\n"
                            "QUEUECFG[batch] MAXPS=100 BOGUS=1\nUSERCFG[DEFAULT] MAXJOB=8\n")
    assert cfg.object_where("USERCFG", "DEFAULT", "maxproc") == (2, 5)
    assert cfg.object_where("USERCFG", "DEFAULT", "MAXJOB") == (4, 18)
    assert cfg.object_where("CLASSCFG", "batch", "MAXPS") == (3, 17)
    assert cfg.object_where("QUEUECFG", "batch", "MAXPS") == (3, 17)
    assert cfg.object_where("CLASSCFG", "batch", "BOGUS") is None
    assert cfg.object_where("USERCFG", "nobody", "MAXJOB") is None
