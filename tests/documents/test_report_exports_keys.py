"""report-exports' ``authentication`` (issue #20): which of the array's allowed hosts hold a
DH-HMAC-CHAP key in nvmet, read from configfs now (the drift check's view of the keys), never
showing a key. The rendered documents run by bash on sandbox directories, as in
test_scripts_local."""

from tests.documents.conftest import CONFIGFS
from tests.documents.test_scripts_local import (
    ARRAY,
    ARRAY_SECRET,
    HOST,
    OTHER_HOST,
    VOLUMES,
    Nodes,
    configure,
    dhchap_key,
    keyed,
    put_secret,
    shows_no_key,
)


def test_report_exports_names_the_allowed_hosts_nvmet_holds_a_key_for(node: Nodes) -> None:
    # Given a controller configured with dh-hmac-chap for two hosts
    target = node("c0")
    target.attach(*VOLUMES)
    host_key, other_key, controller = dhchap_key(), dhchap_key(), dhchap_key()
    put_secret(
        target, ARRAY_SECRET, {"controllerKey": controller, "hosts": {HOST: host_key, OTHER_HOST: other_key}}
    )
    configured = configure(target, "10.0.0.5", **keyed(HostNqns=f"{HOST},{OTHER_HOST}"))
    assert configured.code == 0, configured.stderr

    # When report-exports runs
    result = target.run("report-exports", ArrayId=ARRAY, ConfigfsRoot=CONFIGFS)

    # Then it names both hosts as keyed, and shows no key
    assert result.code == 0, result.stderr
    assert result.report["authentication"] == {"method": "observed", "keyedHosts": [HOST, OTHER_HOST]}
    shows_no_key(result, host_key, other_key, controller)

    # When one host's key is gone from nvmet behind the control plane's back (nvmet shows an
    # empty line for a host without a key)
    (target.nvmet / "hosts" / OTHER_HOST / "dhchap_key").write_text("\n")
    result = target.run("report-exports", ArrayId=ARRAY, ConfigfsRoot=CONFIGFS)

    # Then only the other is keyed
    assert result.report["authentication"]["keyedHosts"] == [HOST]


def test_without_keys_report_exports_names_no_keyed_host(node: Nodes) -> None:
    target = node("c0")
    target.attach(*VOLUMES)
    assert configure(target, "10.0.0.5").code == 0
    result = target.run("report-exports", ArrayId=ARRAY, ConfigfsRoot=CONFIGFS)
    assert result.code == 0, result.stderr
    assert result.report["authentication"] == {"method": "observed", "keyedHosts": []}
