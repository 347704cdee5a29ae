"""The Python the SSM documents run on the nodes (documents/lib/*.py), as plain functions.

tests/documents/test_scripts_local.py runs the same programs inside the rendered documents; these
tests give each function the inputs it parses (nvme-cli's JSON, libnvme's config, a secret's JSON)
directly, and check that every program stays within what a node's python3 has.
"""

import ast
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import dhchap_secret
import nvme_config
import nvme_paths
import reservations
from tests.documents_tool import documents

LIB = documents.DOCUMENTS / "lib"
PROGRAMS = sorted(LIB.glob("*.py"))
HOST_KEY = "DHHC-1:00:" + "A" * 44 + "=:"
CTRL_KEY = "DHHC-1:01:" + "B" * 48 + ":"
NQN = "nqn.2025-01.org.vsa-control-plane:array:demo:vol0a"
HOST = "nqn.2014-08.org.nvmexpress:uuid:0b2c6a4e-3f1d-8a2b-9c4d-5e6f7a8b9c0d"


# --- what every program is


def test_each_program_is_rendered_into_a_document() -> None:
    # Given documents/lib/*.py, When the documents are rendered, Then each is in at least one
    rendered = "".join(documents.load(name).script for name in documents.names())
    assert PROGRAMS
    for program in PROGRAMS:
        assert f"# --- documents/lib/{program.name} (run as python3 -c " in rendered, program.name


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.name)
def test_each_program_is_python_3_9_with_the_standard_library_only(program: Path) -> None:
    source = program.read_text()
    tree = ast.parse(source, feature_version=(3, 9))
    assert "Python 3.9 or later, standard library only" in " ".join((ast.get_docstring(tree) or "").split())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    imported = {name.split(".")[0] for name in imported}
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
    # SSM substitutes {{ Name }} anywhere in the document, and the here-document ends at this line
    assert "{{" not in source
    assert documents.PYTHON_END not in source.splitlines()


def test_a_program_with_the_here_documents_delimiter_is_refused(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "bad.py").write_text(f'x = """\n{documents.PYTHON_END}\n"""\n')
    monkeypatch.setattr(documents, "DOCUMENTS", tmp_path)
    with pytest.raises(ValueError, match="would end its here-document"):
        documents.expand("# vsa:python BAD_PY lib/bad.py\n")


def test_the_rendered_assignment_holds_the_program_byte_for_byte(tmp_path: Path) -> None:
    # Given a script that includes a program, When bash runs the rendered lines, Then the
    # variable holds the file as it is (quotes, backslashes, $ and backticks untouched)
    script = documents.expand("# vsa:python PROGRAM lib/nvme_paths.py\nprintf '%s' \"$PROGRAM\"\n")
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert run.stdout == (LIB / "nvme_paths.py").read_text()


# --- nvme_paths: `nvme list-subsys -o json`

LISTING_2X = [
    {
        "HostNQN": HOST,
        "HostID": "0b2c6a4e-3f1d-8a2b-9c4d-5e6f7a8b9c0d",
        "Subsystems": [
            {
                "Name": "nvme-subsys0",
                "NQN": NQN,
                "IOPolicy": "round-robin",
                "Paths": [
                    {
                        "Name": "nvme0",
                        "Transport": "tcp",
                        "Address": "traddr=10.0.1.5,trsvcid=4420,src_addr=10.0.2.9",
                        "State": "live",
                    },
                    {"Name": "nvme1", "Transport": "tcp", "Address": "traddr=10.0.1.6,trsvcid=4420"},
                ],
            }
        ],
    }
]


def test_paths_of_nvme_cli_2() -> None:
    assert list(nvme_paths.paths(LISTING_2X)) == [
        (NQN, "nvme0", "live", "10.0.1.5", "4420", HOST, "round-robin", "nvme-subsys0"),
        (NQN, "nvme1", "", "10.0.1.6", "4420", HOST, "round-robin", "nvme-subsys0"),
    ]


def test_paths_of_nvme_cli_1_alternate_names_and_paths() -> None:
    # nvme-cli 1.x: one host object; a {Paths} entry belongs to the {Name, NQN} before it
    listing = {
        "Subsystems": [
            {"Name": "nvme-subsys0", "NQN": NQN},
            {"Paths": [{"Name": "nvme0", "Address": "traddr=10.0.1.5,trsvcid=4420", "State": "live"}]},
            {"Name": "nvme-subsys1", "NQN": NQN + "b"},
            {"Paths": [{"Name": "nvme1", "Address": "traddr=10.0.1.5,trsvcid=4421", "State": "connecting"}]},
        ]
    }
    assert list(nvme_paths.paths(listing)) == [
        (NQN, "nvme0", "live", "10.0.1.5", "4420", "", "", "nvme-subsys0"),
        (NQN + "b", "nvme1", "connecting", "10.0.1.5", "4421", "", "", "nvme-subsys1"),
    ]


def test_lines_join_fields_so_empty_ones_survive() -> None:
    text = json.dumps(LISTING_2X)
    assert nvme_paths.lines(text)[1] == "\x1f".join(
        [NQN, "nvme1", "", "10.0.1.6", "4420", HOST, "round-robin", "nvme-subsys0"]
    )
    assert nvme_paths.lines("") == nvme_paths.lines("  \n") == nvme_paths.lines("[]") == []
    assert nvme_paths.lines('[7, {"HostNQN": "h"}]') == []  # not a host, a host without subsystems
    with pytest.raises(ValueError, match="Expecting value"):
        nvme_paths.lines("Failed to scan topology")


def test_address_fields() -> None:
    assert nvme_paths.address_fields("traddr=10.0.1.5,trsvcid=4420,src_addr=10.0.2.9") == {
        "traddr": "10.0.1.5",
        "trsvcid": "4420",
        "src_addr": "10.0.2.9",
    }
    assert nvme_paths.address_fields("") == {}
    assert nvme_paths.address_fields("traddr=a=b,junk") == {"traddr": "a=b"}


# --- nvme_config: libnvme's JSON config


def _port(**overrides: object) -> nvme_config.Port:
    fields: dict[str, object] = {
        "hostnqn": HOST,
        "hostid": "0b2c6a4e-3f1d-8a2b-9c4d-5e6f7a8b9c0d",
        "traddr": "10.0.1.5",
        "trsvcid": "4420",
        "keep_alive_tmo": 2,
        "ctrl_loss_tmo": 60,
        "reconnect_delay": 2,
        "fast_io_fail_tmo": -1,
        "nqns": (NQN,),
        **overrides,
    }
    return nvme_config.Port(**fields)  # type: ignore[arg-type]


def test_port_from_the_command_line_and_the_keys_on_stdin() -> None:
    argv = [HOST, "", "10.0.1.5", "4420", "2", "60", "2", "5", NQN, NQN + "b"]
    assert nvme_config.Port.from_command(argv, f"{HOST_KEY}\n{CTRL_KEY}\n") == _port(
        hostid="", fast_io_fail_tmo=5, nqns=(NQN, NQN + "b"), host_key=HOST_KEY, ctrl_key=CTRL_KEY
    )
    # no keys: two empty lines, or nothing at all
    assert nvme_config.Port.from_command(argv, "\n\n").host_key == ""
    assert nvme_config.Port.from_command(argv, "") == nvme_config.Port.from_command(argv, "\n\n")


def test_merge_into_an_empty_config() -> None:
    hosts: list[object] = []
    assert nvme_config.merge(hosts, _port()) == []
    assert hosts == [
        {
            "hostnqn": HOST,
            "hostid": "0b2c6a4e-3f1d-8a2b-9c4d-5e6f7a8b9c0d",
            "subsystems": [
                {
                    "nqn": NQN,
                    "ports": [
                        {
                            "transport": "tcp",
                            "traddr": "10.0.1.5",
                            "trsvcid": "4420",
                            "keep_alive_tmo": 2,
                            "ctrl_loss_tmo": 60,
                            "reconnect_delay": 2,
                        }
                    ],
                }
            ],
        }
    ]
    assert not nvme_config.keyed(hosts)


def test_merge_keeps_every_other_entry_and_updates_its_own_port() -> None:
    # Given a config with another host, another subsystem, another address and our port with
    # old settings, a fast_io_fail_tmo and keys
    other_host = {"hostnqn": "nqn.other", "subsystems": [{"nqn": NQN, "ports": [{"traddr": "x"}]}]}
    ours = {"transport": "tcp", "traddr": "10.0.1.5", "trsvcid": "4420", "keep_alive_tmo": 5,
            "fast_io_fail_tmo": 3, "dhchap_key": HOST_KEY, "dhchap_ctrl_key": CTRL_KEY}  # fmt: skip
    other_port = {"transport": "tcp", "traddr": "10.0.1.6", "trsvcid": "4420", "dhchap_key": HOST_KEY}
    other_subsystem = {"nqn": "nqn.else", "ports": []}
    hosts: list[object] = [
        other_host,
        {"hostnqn": HOST, "subsystems": [other_subsystem, {"nqn": NQN, "ports": [other_port, ours]}]},
    ]
    before = json.loads(json.dumps(hosts))
    # When connect-path asks for the same port without authentication and with fast_io_fail off
    assert nvme_config.merge(hosts, _port()) == []
    # Then only that port changed: new settings, no fast_io_fail_tmo, no keys; no hostid added
    assert ours == {"transport": "tcp", "traddr": "10.0.1.5", "trsvcid": "4420", "keep_alive_tmo": 2,
                    "ctrl_loss_tmo": 60, "reconnect_delay": 2}  # fmt: skip
    before[1]["subsystems"][1]["ports"][1] = ours
    assert hosts == before
    assert nvme_config.keyed(hosts)  # the other address's port still holds a key


def test_merge_puts_the_keys_on_the_port_and_warns_of_a_host_key() -> None:
    hosts: list[object] = [{"hostnqn": HOST, "dhchap_key": HOST_KEY}]
    warnings = nvme_config.merge(hosts, _port(host_key=HOST_KEY, ctrl_key=CTRL_KEY, fast_io_fail_tmo=0))
    assert warnings == [
        f"the host entry of {HOST} has its own dhchap_key, which nvme-cli uses before the port key"
    ]
    (port,) = hosts[0]["subsystems"][0]["ports"]  # type: ignore[index]
    assert (port["dhchap_key"], port["dhchap_ctrl_key"], port["fast_io_fail_tmo"]) == (HOST_KEY, CTRL_KEY, 0)
    assert nvme_config.keyed(hosts)


def test_keyed() -> None:
    assert not nvme_config.keyed([])
    assert not nvme_config.keyed([{"hostnqn": HOST, "subsystems": None}])
    assert nvme_config.keyed([{"dhchap_key": HOST_KEY}])
    assert nvme_config.keyed([{"subsystems": [{"ports": [{"dhchap_ctrl_key": CTRL_KEY}]}]}])


def test_parse() -> None:
    assert nvme_config.parse("/etc/nvme/config.json", " \n") == []
    with pytest.raises(SystemExit, match=r"/etc/nvme/config\.json is not a list of hosts"):
        nvme_config.parse("/etc/nvme/config.json", '{"hostnqn": "x"}')


def test_update_writes_the_file_whole_root_only_with_keys(tmp_path: Path) -> None:
    # Given no config yet
    path = str(tmp_path / "etc" / "nvme" / "config.json")
    # When a port with keys is written, Then the file is 0600 and holds them
    assert nvme_config.update(path, _port(host_key=HOST_KEY, ctrl_key=CTRL_KEY)) == []
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    written = Path(path).read_text()
    assert written.endswith("\n")
    assert json.loads(written)[0]["subsystems"][0]["ports"][0]["dhchap_key"] == HOST_KEY
    # When the same port is written without keys, Then no key is left and the file is 0644
    nvme_config.update(path, _port())
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert "dhchap" not in Path(path).read_text()
    # and nothing but the config and its lock is left in the directory
    assert sorted(os.listdir(tmp_path / "etc" / "nvme")) == ["config.json", "config.json.lock"]


def test_update_names_the_file_in_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps([{"hostnqn": HOST, "dhchap_key": HOST_KEY}]))
    (warning,) = nvme_config.update(str(path), _port(host_key=HOST_KEY, ctrl_key=CTRL_KEY))
    assert warning.startswith(f"warning: {path}: the host entry of {HOST} has its own dhchap_key")


# --- dhchap_secret: the secret's JSON

SECRET = {"hostKey": HOST_KEY, "controllerKey": CTRL_KEY, "paths": {"10.0.1.5": {"hostKey": HOST_KEY}}}


def test_lookup() -> None:
    assert dhchap_secret.lookup(SECRET, "hostKey") == HOST_KEY
    assert dhchap_secret.lookup(SECRET, "paths/10.0.1.5/hostKey") == HOST_KEY
    assert dhchap_secret.lookup(SECRET, "paths/10.0.1.6/hostKey") is None
    assert dhchap_secret.lookup(SECRET, "hostKey/deeper") is None
    assert dhchap_secret.lookup([1], "hostKey") is None


def test_keys_found() -> None:
    wanted = ["hostKey", "paths/10.0.1.5/hostKey"]
    assert dhchap_secret.keys(SECRET, "s", wanted) == {
        "hostKey": HOST_KEY,
        "paths/10.0.1.5/hostKey": HOST_KEY,
    }


def test_keys_name_what_is_missing_or_malformed_and_show_no_key() -> None:
    secret = {"hostKey": "", "controllerKey": HOST_KEY[:-5] + ":", "hosts": {"h": 7}}
    with pytest.raises(SystemExit) as refused:
        dhchap_secret.keys(secret, "vsa/demo", ["hostKey", "absent", "controllerKey", "hosts/h"])
    message = str(refused.value)
    assert message == (
        "the secret vsa/demo: no key for hostKey, absent; not a DHHC-1 key "
        "(DHHC-1:<hash>:<base64 of key and CRC-32>:) for controllerKey, hosts/h"
    )
    assert "DHHC-1:00" not in message
    with pytest.raises(SystemExit, match="the secret vsa/demo is not a JSON object"):
        dhchap_secret.keys(["x"], "vsa/demo", ["hostKey"])


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        (HOST_KEY, True),
        ("DHHC-1:03:" + "A" * 88 + "==:", True),
        ("DHHC-1:04:" + "A" * 44 + "=:", False),  # hash id 0-3
        ("DHHC-1:00:" + "A" * 43 + ":", False),  # too short: truncated
        ("DHHC-1:00:" + "A" * 44 + "=", False),  # no closing colon
        (" " + HOST_KEY, False),
    ],
)
def test_key_form(key: str, valid: bool) -> None:
    assert bool(dhchap_secret.KEY.fullmatch(key)) is valid


def test_parse_and_has() -> None:
    assert dhchap_secret.parse('{"a": 1}', "s") == {"a": 1}
    with pytest.raises(SystemExit, match=r"^the secret s is not JSON$"):
        dhchap_secret.parse(HOST_KEY, "s")
    text = json.dumps(SECRET)
    assert dhchap_secret.has(text, "paths/10.0.1.5")
    assert not dhchap_secret.has(text, "paths/10.0.1.6")
    assert not dhchap_secret.has("not json", "paths")


def test_main_prints_one_key_a_line_and_yes_or_no(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", _Stdin(json.dumps(SECRET)))
    assert dhchap_secret.main(["keys", "s", "hostKey", "controllerKey"]) == 0
    assert capsys.readouterr().out == f"hostKey {HOST_KEY}\ncontrollerKey {CTRL_KEY}\n"
    monkeypatch.setattr(sys, "stdin", _Stdin("{}"))
    assert dhchap_secret.main(["has", "paths/x"]) == 0
    assert capsys.readouterr().out == "no\n"


class _Stdin:
    def __init__(self, text: str) -> None:
        self.text = text

    def read(self) -> str:
        return self.text


# --- reservations.py


def test_the_reservation_key_is_per_boot_52_bits_and_never_zero() -> None:
    keys = {reservations.key(f"{n:08x}-boot") for n in range(2000)}
    assert len(keys) == 2000  # a new boot, a new key
    values = [int(k, 16) for k in keys]
    assert all(0 < v < 2**52 for v in values)
    assert reservations.key("same\n") == reservations.key("same")  # the file's newline ignored
    assert all(k == f"{int(k, 16):#x}" for k in keys)  # one spelling: lower-case, no leading zero


def test_the_registered_keys_are_read_from_either_name_nvme_cli_gives_them() -> None:
    report = {"gen": 3, "rtype": 5, "regctl": 2, "ptpls": 0}
    entries = [
        {"cntlid": 1, "rcsts": 1, "hostid": "00", "rkey": 2**51 + 7},
        {"cntlid": 2, "rcsts": 1, "rkey": 10},
    ]
    for name in ("regctls", "regctlext"):
        assert reservations.registered({**report, name: entries}) == (5, [f"{2**51 + 7:#x}", "0xa"])
    assert reservations.registered({"gen": 0, "rtype": 0, "regctl": 0}) == (0, [])


def test_the_keys_command_reads_stdin_and_refuses_what_is_not_a_report() -> None:
    program = str(LIB / "reservations.py")
    done = subprocess.run(
        [sys.executable, program, "keys"],
        input=json.dumps({"rtype": 5, "regctls": [{"rkey": 255}]}),
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["5", "0xff"]
    bad = subprocess.run(
        [sys.executable, program, "keys"], input="[1]", capture_output=True, text=True, check=False
    )
    assert bad.returncode == 1
    assert "not a resv-report JSON" in bad.stderr
