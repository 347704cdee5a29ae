"""The SSM documents: template.yaml holds exactly what documents/ renders, and every parameter's
allowedPattern keeps its value inside the script's quotes (SSM substitutes {{ Name }} as text)."""

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.documents_tool import documents
from tests.prerequisites import require

ROOT = Path(__file__).resolve().parents[2]
# What would end a single-quoted shell string or start a command; every pattern must refuse them.
HOSTILE = ["'", ";", "$(", "`", "\n", '"', "$", "|", "&", " ", "<", ">", "\\"]


NAMES = documents.names()


class _CfnLoader(yaml.CSafeLoader):
    """Reads template.yaml's short-form intrinsics (!Ref, !Sub, ...) as plain values (libyaml)."""


_CfnLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def _template() -> dict[str, Any]:
    return yaml.load((ROOT / "template.yaml").read_text(), Loader=_CfnLoader)


def _parameters() -> list[tuple[str, str, dict[str, str], str]]:
    """(document, parameter, declaration, a valid example value) for every parameter."""
    found = []
    for name in NAMES:
        document = documents.load(name)
        for key, declared in document.parameters.items():
            example = document.examples.get(key) or declared.get("default", "")
            found.append((name, key, declared, example))
    return found


PARAMETERS = _parameters()


def test_the_documents_the_workflows_call_exist():
    assert {"configure-target", "connect-path", "disconnect-path"} <= set(NAMES)


def test_template_holds_exactly_what_documents_render():
    assert documents.render((ROOT / "template.yaml").read_text()) == (ROOT / "template.yaml").read_text(), (
        "template.yaml's SSM documents are out of date: run `python tools/documents.py`"
    )


def test_check_mode_passes_on_the_committed_template():
    result = subprocess.run(
        [shutil.which("python3") or "python3", str(ROOT / "tools" / "documents.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr


def test_each_document_is_a_command_resource_with_an_output():
    template = _template()
    for name in NAMES:
        document = documents.load(name)
        resource = template["Resources"][document.resource]
        assert resource["Type"] == "AWS::SSM::Document"
        properties = resource["Properties"]
        assert properties["DocumentType"] == "Command"
        assert properties["UpdateMethod"] == "NewVersion"
        content = properties["Content"]
        assert content["schemaVersion"] == "2.2"
        (step,) = content["mainSteps"]
        assert step["action"] == "aws:runShellScript"
        assert 0 < int(step["inputs"]["timeoutSeconds"]) <= 3600
        assert step["inputs"]["runCommand"] == documents.run_command(document)
        assert document.output in template["Outputs"]


@pytest.mark.parametrize("name", NAMES)
def test_each_document_fits_ssm_s_size_limit(name: str):
    # An SSM document's content is at most 64 KB; the shell and Python libraries rendered in count
    size = len(json.dumps(documents.content(documents.load(name))).encode())
    assert size <= 64 * 1024, f"documents/{name}: {size} bytes rendered, over SSM's 64 KB"


@pytest.mark.parametrize(("document", "parameter", "declared", "example"), PARAMETERS)
def test_every_parameter_is_a_described_string_with_a_pattern_its_values_match(
    document: str, parameter: str, declared: dict[str, str], example: str
):
    assert declared["type"] == "String"
    assert declared.get("description"), f"{document}.{parameter} has no description"
    pattern = declared.get("allowedPattern")
    assert pattern, f"{document}.{parameter} has no allowedPattern"
    assert pattern.startswith("^")
    assert pattern.endswith("$")
    assert example, f"{document}.{parameter}: add a valid value under examples: in documents/{document}.yaml"
    assert re.fullmatch(pattern, example), f"{document}.{parameter}: example {example!r} does not match"
    if "default" in declared:
        assert re.fullmatch(pattern, declared["default"]), f"{document}.{parameter}: default does not match"


@pytest.mark.parametrize(("document", "parameter", "declared", "example"), PARAMETERS)
@pytest.mark.parametrize("hostile", HOSTILE, ids=repr)
def test_every_pattern_refuses_shell_syntax_anywhere_in_a_value(
    document: str, parameter: str, declared: dict[str, str], example: str, hostile: str
):
    pattern = declared["allowedPattern"]
    for value in (hostile, example + hostile, hostile + example, example[:1] + hostile + example[1:]):
        # SendCommand matches the whole value; a search must not find a match either (an
        # implementation that searched would still be anchored by ^...$ without MULTILINE)
        assert not re.fullmatch(pattern, value), f"{document}.{parameter} accepts {value!r}"
        assert not re.search(pattern, value) or (hostile == "\n" and value.endswith("\n")), (
            f"{document}.{parameter}: a search finds {value!r}"
        )


@pytest.mark.parametrize("name", NAMES)
def test_the_prologue_assigns_every_parameter_single_quoted_and_the_script_uses_it(name: str):
    document = documents.load(name)
    lines = documents.run_command(document)
    assert lines[0] == "#!/bin/bash"
    for parameter in document.parameters:
        variable = documents.variable(parameter)
        assert f"{variable}='{{{{ {parameter} }}}}'" in lines
        assert re.search(rf"\${{?{variable}\b", document.script), f"{name} never reads {variable}"
    # only the prologue has placeholders: SSM must substitute nothing inside the script itself
    body = document.script
    assert "{{" not in body, f"documents/{name}.sh contains '{{{{': SSM would substitute it"


@pytest.mark.parametrize("name", NAMES)
def test_rendered_scripts_are_valid_bash_and_shellcheck_clean(name: str):
    script = "\n".join(documents.run_command(documents.load(name))) + "\n"
    syntax = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True, check=False)
    assert syntax.returncode == 0, syntax.stderr
    shellcheck = shutil.which("shellcheck")
    require(None if shellcheck else "shellcheck is not installed")
    assert shellcheck is not None
    lint = subprocess.run(
        [shellcheck, "--shell=bash", "--severity=warning", "-"],
        input=script,
        capture_output=True,
        text=True,
        check=False,
    )
    assert lint.returncode == 0, lint.stdout


def test_render_script_checks_values_as_send_command_does():
    with pytest.raises(ValueError, match="does not match"):
        documents.render_script("connect-path", {"ArrayId": "x'; reboot #"})
    with pytest.raises(ValueError, match="required"):
        documents.render_script("connect-path", {})


def test_the_spec_takes_each_mountpoint_exactly_as_freeze_io_does():
    # The API validates mountpoints with vsa_core's pattern; freeze-io's Mountpoints parameter is
    # a comma-joined list of items of the same pattern, at most 64. A spec stored by the API must
    # never fail freeze-io's pattern at backup time, nor be refused by the API when freeze-io
    # would take it.
    from vsa_core.arrays.spec import MAX_MOUNTPOINTS, MOUNTPOINT_PATTERN

    declared = documents.load("freeze-io").parameters["Mountpoints"]["allowedPattern"]
    item = MOUNTPOINT_PATTERN.pattern
    assert declared == f"^$|^({item})(,{item}){{0,{MAX_MOUNTPOINTS - 1}}}$"


def test_every_id_the_spec_passes_to_a_document_is_the_pattern_the_document_takes():
    # One definition each (vsa_core.arrays.ids, vsa_core.naming): what the API stores is what
    # SendCommand will accept, so an apply never stores a value a document would refuse later.
    from vsa_core.arrays.ids import NQN, VOLUME_ID
    from vsa_core.naming import ARRAY_ID_PATTERN

    for name in ("configure-target", "connect-path", "disconnect-path"):
        parameters = documents.load(name).parameters
        assert parameters["ArrayId"]["allowedPattern"] == ARRAY_ID_PATTERN, name
        volumes = parameters["Volumes"]["allowedPattern"]
        assert volumes in (f"^{VOLUME_ID}(,{VOLUME_ID})*$", f"^({VOLUME_ID}(,{VOLUME_ID})*)?$"), name
    assert documents.load("connect-path").parameters["HostNqn"]["allowedPattern"] == f"^{NQN}$"
    hosts = documents.load("configure-target").parameters["HostNqns"]["allowedPattern"]
    assert hosts == f"^({NQN}(,{NQN})*)?$"


def test_the_authentication_parameters_take_what_secrets_manager_and_nvmet_take_and_nothing_else():
    # (issue #20) Both documents name the secret the same way: a Secrets Manager name or ARN,
    # never a value the AWS CLI would read as an option (a leading '-'); none when unused
    for name in ("configure-target", "connect-path"):
        parameters = documents.load(name).parameters
        assert parameters["Authentication"]["default"] == "none"
        assert re.fullmatch(parameters["Authentication"]["allowedPattern"], "dh-hmac-chap")
        assert not re.fullmatch(parameters["Authentication"]["allowedPattern"], "DH-HMAC-CHAP")
        secret = parameters["KeysSecretId"]["allowedPattern"]
        assert parameters["KeysSecretId"]["default"] == "none"
        for good in (
            "none",
            "vsa/demo-array/dhchap",
            "MySecret_1+=.@",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:vsa/demo/dhchap-AbCdEf",
            "arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:x-AbCdEf",
        ):
            assert re.fullmatch(secret, good), (name, good)
        for bad in ("", "-x", "--secret-id", "a:b", "arn:aws:s3:::bucket", "a" * 513, "x,y", "x*"):
            assert not re.fullmatch(secret, bad), (name, bad)
        assert parameters["AwsCommand"]["default"] == "aws"
        assert (
            parameters["AwsCommand"]["allowedPattern"]
            == parameters["NvmeCommand" if name == "connect-path" else "ModprobeCommand"]["allowedPattern"]
        )
    assert documents.load("configure-target").parameters["KeysSecretId"] == {
        **documents.load("connect-path").parameters["KeysSecretId"],
        "description": documents.load("configure-target").parameters["KeysSecretId"]["description"],
    }
    # nvmet's configfs names (drivers/nvme/target/configfs.c): the hash as the crypto API names
    # it, the FFDHE groups of RFC 7919 or null
    controller = documents.load("configure-target").parameters
    hashes = [h for h in ("hmac(sha256)", "hmac(sha384)", "hmac(sha512)", "sha256", "hmac(md5)")
              if re.fullmatch(controller["DhchapHash"]["allowedPattern"], h)]  # fmt: skip
    assert hashes == ["hmac(sha256)", "hmac(sha384)", "hmac(sha512)"]
    groups = [
        "null",
        "ffdhe2048",
        "ffdhe3072",
        "ffdhe4096",
        "ffdhe6144",
        "ffdhe8192",
        "ffdhe1024",
        "modp2048",
    ]
    allowed = [g for g in groups if re.fullmatch(controller["DhchapDhgroup"]["allowedPattern"], g)]
    assert allowed == groups[:6]
