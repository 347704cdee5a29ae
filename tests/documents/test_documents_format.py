"""The host documents' format and parameter safety: no root, no kernel objects."""

import base64
import re
import shutil
import subprocess

import pytest

from tests.documents_util import DOCUMENTS, load_document, render_script, run_document, shell_name
from tests.prerequisites import require

HOST_DOCUMENTS = ["freeze-io", "thaw-io"]
PARAMETERS = ["Mountpoints", "TimeoutSeconds", "BackupId", "StateDir", "FsfreezeCommand"]
# freeze-io alone also takes DryRun (the backup workflow's preflight: the checks, nothing frozen) and
# the signals (presigned URLs, base64url: the frozen report PUT, the thaw marker polled)
OWN_PARAMETERS = {
    "freeze-io": ["DryRun", "ThawSignal", "FrozenSignal", "SignalPollMilliseconds", "FreezeAt"],
    "thaw-io": [],
}
HOSTILE = ["a'b", "/x'; reboot; '", "$(reboot)", "`reboot`", "/a;b", "/a b", "/a|b", "/a&b", "/a>b", "/a\nb",
           '/a"b', "/a\\b", "/a{{b}}", "/a*", "/a?b", "/a$HOME"]  # fmt: skip


@pytest.mark.parametrize("name", HOST_DOCUMENTS)
def test_document_shape(name: str) -> None:
    document = load_document(name)
    assert set(document) <= {"description", "parameters", "timeoutSeconds", "examples"}
    assert 0 < int(document.get("timeoutSeconds", "600")) <= 3600
    assert document["description"].startswith(f"VSA {name}:")
    assert list(document["parameters"]) == PARAMETERS + OWN_PARAMETERS[name]
    for parameter, spec in document["parameters"].items():
        assert spec["type"] == "String", parameter
        assert set(spec) == {"type", "default", "description", "allowedPattern"}, parameter
        assert re.fullmatch(spec["allowedPattern"], spec["default"]), (
            f"{parameter}'s default fails its pattern"
        )
        example = document.get("examples", {}).get(parameter) or spec["default"]
        assert example, f"{parameter}: give an example (tools/documents.py's tests use it)"
        assert re.fullmatch(spec["allowedPattern"], example)


@pytest.mark.parametrize("name", HOST_DOCUMENTS)
@pytest.mark.parametrize("parameter", PARAMETERS)
def test_patterns_refuse_quotes_and_shell_metacharacters(name: str, parameter: str) -> None:
    pattern = load_document(name)["parameters"][parameter]["allowedPattern"]
    for value in HOSTILE:
        assert not re.fullmatch(pattern, value), f"{name} {parameter} accepts {value!r}"


@pytest.mark.parametrize("parameter", OWN_PARAMETERS["freeze-io"])
def test_freeze_ios_own_patterns_refuse_quotes_and_shell_metacharacters(parameter: str) -> None:
    pattern = load_document("freeze-io")["parameters"][parameter]["allowedPattern"]
    for value in HOSTILE:
        assert not re.fullmatch(pattern, value), f"freeze-io {parameter} accepts {value!r}"


def test_the_signal_poll_interval_is_10_to_1000_milliseconds() -> None:
    pattern = load_document("freeze-io")["parameters"]["SignalPollMilliseconds"]["allowedPattern"]
    assert [v for v in ("10", "50", "99", "100", "999", "1000") if not re.fullmatch(pattern, v)] == []
    assert [v for v in ("", "0", "9", "05", "1001", "2000", "50.5", "-50") if re.fullmatch(pattern, v)] == []


def test_the_two_documents_share_one_parameter_set() -> None:
    freeze_only = (
        load_document("freeze-io")["parameters"].keys() - load_document("thaw-io")["parameters"].keys()
    )
    assert freeze_only == set(OWN_PARAMETERS["freeze-io"])
    for parameter in PARAMETERS:
        freeze = load_document("freeze-io")["parameters"][parameter]
        thaw = load_document("thaw-io")["parameters"][parameter]
        assert (freeze["default"], freeze["allowedPattern"]) == (thaw["default"], thaw["allowedPattern"])


def test_the_shared_code_is_written_once_and_rendered_into_both() -> None:
    for name in HOST_DOCUMENTS:
        assert "# vsa:include lib/freeze-thaw.sh" in (DOCUMENTS / f"{name}.sh").read_text()
        assert "# --- documents/lib/freeze-thaw.sh" in render_script(name, {"Mountpoints": "/data"})


def test_prologue_names_and_quoting() -> None:
    assert [shell_name(p) for p in PARAMETERS] == [
        "MOUNTPOINTS",
        "TIMEOUT_SECONDS",
        "BACKUP_ID",
        "STATE_DIR",
        "FSFREEZE_COMMAND",
    ]
    script = render_script("freeze-io", {"Mountpoints": "/data,/logs", "BackupId": "bk-1"})
    assert script.startswith(
        "#!/bin/bash\n# freeze-io: rendered from documents/freeze-io.sh by tools/documents.py\n"
        "MOUNTPOINTS='/data,/logs'\nTIMEOUT_SECONDS='10'\nBACKUP_ID='bk-1'\n"
        "STATE_DIR='/run/vsa-freeze'\nFSFREEZE_COMMAND='fsfreeze'\nDRY_RUN='false'\nTHAW_SIGNAL=''\n"
        "FROZEN_SIGNAL=''\nSIGNAL_POLL_MILLISECONDS='50'\nFREEZE_AT=''\n# freeze-io:"
    )
    with pytest.raises(ValueError, match="does not match"):
        render_script("freeze-io", {"Mountpoints": "/x'; reboot; '"})


@pytest.mark.parametrize("name", HOST_DOCUMENTS)
def test_scripts_parse(name: str) -> None:
    script = render_script(name, {"Mountpoints": "/data"})
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0


@pytest.mark.parametrize("name", HOST_DOCUMENTS)
@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        ({"Mountpoints": "/"}, "mountpoint '/'"),
        ({"Mountpoints": "/data/../etc"}, "without '..'"),
        ({"Mountpoints": ""}, "give at least one"),
        ({"Mountpoints": "/data", "TimeoutSeconds": "0"}, "TimeoutSeconds '0'"),
        ({"Mountpoints": "/data", "TimeoutSeconds": "61"}, "TimeoutSeconds '61'"),
    ],
)
def test_the_scripts_check_their_parameters_too(
    name: str, values: dict[str, str], complaint: str, tmp_path
) -> None:
    # The script refuses, before touching anything, values that slip past (or bypass) the patterns
    values = {**values, "StateDir": str(tmp_path / "state")}
    run = run_document(name, values, tmp_path, check_patterns=False)
    assert run.returncode == 1
    assert run.report["status"] == "failed"
    assert complaint in run.report["reason"]
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("name", HOST_DOCUMENTS)
def test_the_first_command_moves_to_bash(name: str) -> None:
    # The agent runs aws:runShellScript with sh (dash on Debian, Ubuntu): everything before the
    # bash re-exec, the prologue included, must be POSIX sh.
    commands = [
        line
        for line in render_script(name, {"Mountpoints": "/data"}).splitlines()
        if line.strip() and not line.startswith("#")
    ]
    prologue = len(PARAMETERS + OWN_PARAMETERS[name])
    assert all(re.fullmatch(r"[A-Z_]+='[^']*'", line) for line in commands[:prologue])
    # (tools/documents.py puts #!/bin/bash first, which the agent's `sh -c <file>` honours; the
    # re-exec covers `sh <file>`)
    assert commands[prologue] == 'if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi'


def test_kernel_tests_skip_with_the_reason_when_not_root(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.documents import xfs_lab as conftest

    monkeypatch.setattr(conftest.os, "geteuid", lambda: 1000)
    assert conftest._missing() == "needs root (loop devices, mount, fsfreeze)"
    monkeypatch.setattr(conftest.os, "geteuid", lambda: 0)
    monkeypatch.setattr(conftest.shutil, "which", lambda tool: None if tool == "mkfs.xfs" else "/bin/true")
    assert "missing mkfs.xfs" in (conftest._missing() or "")


@pytest.mark.parametrize("name", HOST_DOCUMENTS)
def test_rendered_scripts_are_shellcheck_clean(name: str) -> None:
    shellcheck = shutil.which("shellcheck")
    require(None if shellcheck else "shellcheck is not installed")
    assert shellcheck is not None
    script = render_script(name, {"Mountpoints": "/data"})
    lint = subprocess.run(
        [shellcheck, "--shell=bash", "--severity=warning", "-"], input=script, text=True, capture_output=True
    )
    assert lint.returncode == 0, lint.stdout


# drill-check: the restore drill's document, on an instance of its own (its parameters are not
# the freeze documents')
DRILL_PARAMETERS = [
    "Volumes",
    "DeviceDir",
    "MountDir",
    "Command",
    "CommandTimeoutSeconds",
    "DeviceWaitSeconds",
]


def test_drill_check_shape() -> None:
    document = load_document("drill-check")
    assert set(document) <= {"description", "parameters", "timeoutSeconds", "examples"}
    assert document["timeoutSeconds"] == "3600"
    assert document["description"].startswith("VSA drill-check:")
    assert list(document["parameters"]) == DRILL_PARAMETERS
    for parameter, spec in document["parameters"].items():
        assert spec["type"] == "String", parameter
        required = parameter == "Volumes"
        assert set(spec) == {"type", "description", "allowedPattern"} | (set() if required else {"default"})
        if not required:
            assert re.fullmatch(spec["allowedPattern"], spec["default"]), parameter
        example = document["examples"].get(parameter) or spec.get("default")
        assert example, parameter
        assert re.fullmatch(spec["allowedPattern"], example), parameter


@pytest.mark.parametrize("parameter", DRILL_PARAMETERS)
def test_drill_check_patterns_refuse_quotes_and_shell_metacharacters(parameter: str) -> None:
    pattern = load_document("drill-check")["parameters"][parameter]["allowedPattern"]
    for value in [*HOSTILE, "vol-0123abcd'", "vol-0123abcd;reboot", "vol-0123abcd,$(reboot)"]:
        assert not re.fullmatch(pattern, value), f"drill-check {parameter} accepts {value!r}"


VOLUMES_64 = ",".join(f"vol-{n:08x}" for n in range(64))
DRILL_VALUES = [
    (
        "Volumes",
        ["vol-0123abcd", "vol-0123456789abcdef0", VOLUMES_64],
        [
            "",
            "vol-0123abc",
            "vol-0123abcde",
            "vol-0123456789ABCDEF0",
            "vol-0123abcd,",
            "vol-0123abcd,,vol-0123abce",
            f"{VOLUMES_64},vol-ffffffff",
        ],
    ),
    # relative: from the working directory (a local-cloud node's sandbox)
    ("DeviceDir", ["/dev/disk/by-id", "/tmp/x.y_z-1", "dev/disk/by-id"], ["", "/", "/x y", "dev/$(x)"]),
    ("MountDir", ["/run/vsa-drill", "run/vsa-drill"], ["", "/", "/run vsa", "run;x"]),
    ("Command", ["", "ZXhpdCAw", "a" * 8000], ["abc", "ZXhpdCAw==", "ab+/", "a" * 8001]),
    ("CommandTimeoutSeconds", ["1", "300", "999", "1000", "3599", "3600"], ["", "0", "01", "3601", "-1"]),
    ("DeviceWaitSeconds", ["0", "9", "30", "299", "300"], ["", "00", "301", "1000", "-1"]),
]


@pytest.mark.parametrize(("parameter", "good", "bad"), DRILL_VALUES, ids=[v[0] for v in DRILL_VALUES])
def test_drill_check_patterns_take_exactly_their_values(
    parameter: str, good: list[str], bad: list[str]
) -> None:
    pattern = load_document("drill-check")["parameters"][parameter]["allowedPattern"]
    assert [v for v in good if not re.fullmatch(pattern, v)] == []
    assert [v for v in bad if re.fullmatch(pattern, v)] == []


def test_drill_check_takes_only_volume_ids_the_spec_takes() -> None:
    # an EBS volume id is vol- and 8 (older) or 17 hex digits; the spec's pattern is looser
    from vsa_core.arrays.ids import VOLUME_ID

    pattern = load_document("drill-check")["parameters"]["Volumes"]["allowedPattern"]
    for digits in range(1, 20):
        volume = "vol-" + "a" * digits
        if re.fullmatch(pattern, volume):
            assert digits in (8, 17)
            assert re.fullmatch(VOLUME_ID, volume)


def test_drill_check_s_example_command_is_base64url_of_a_shell_command() -> None:
    example = load_document("drill-check")["examples"]["Command"]
    decoded = base64.urlsafe_b64decode(example + "=" * (-len(example) % 4)).decode()
    assert "$VSA_DRILL_MOUNTS" in decoded
    assert subprocess.run(["bash", "-n", "-c", decoded], check=False).returncode == 0


def test_drill_check_s_first_command_moves_to_bash() -> None:
    # as the freeze documents: the agent may run the file with sh
    commands = [
        line
        for line in render_script("drill-check", {"Volumes": "vol-0123abcd"}).splitlines()
        if line.strip() and not line.startswith("#")
    ]
    prologue = len(DRILL_PARAMETERS)
    assert all(re.fullmatch(r"[A-Z_]+='[^']*'", line) for line in commands[:prologue])
    assert commands[prologue] == 'if [ -z "${BASH_VERSION:-}" ]; then exec bash "$0" "$@"; fi'
