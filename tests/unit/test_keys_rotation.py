"""Key rotation (vsa_core.arrays.keys: ``Rotation``, ``rekey_step``), pure: the order it takes,
and the property that makes it safe without an IO stop: at every point of a rotation, each
host's copy gives, for the address of every controller whose nvmet holds the new keys, exactly
the keys that controller's copy holds for it (a path that reconnects authenticates), and at the
end no copy holds an old key."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vsa_core.arrays import keys

HOSTS = [f"nqn.2014-08.org.nvmexpress:uuid:0b1b3c1e-0000-4000-8000-00000000000{i}" for i in range(4)]


def controllers(n: int) -> list[tuple[str, str]]:
    return [(f"i-0c00000000000000{i}", f"10.0.1.{10 + i}") for i in range(n)]


def path_keys(host_copy: str, address: str) -> tuple[str, str]:
    """The keys connect-path takes for ``address`` from a host's copy (as documents/connect-path)."""
    value = json.loads(host_copy)
    chosen = value.get("paths", {}).get(address, value)
    return chosen["hostKey"], chosen["controllerKey"]


def advance(state: keys.ArrayKeys, serving: list[tuple[str, str]]) -> tuple[keys.ArrayKeys, keys.RekeyStep]:
    """One action of the rotation as ReconcileArray's rekey phase takes it, succeeding."""
    step = keys.rekey_step(state, serving)
    if step.kind == "target":
        assert step.begin is not None
        assert step.done is not None
        state = state.at_stage(step.instance_id, step.begin, step.address)
        state = state.at_stage(step.instance_id, step.done, step.address)
    elif step.kind == "paths":
        assert step.done is not None
        state = state.at_stage(step.instance_id, step.done, step.address)
    elif step.kind == "promote":
        state = state.promoted()
    return state, step


def consistent(state: keys.ArrayKeys, serving: list[tuple[str, str]], nqns: list[str]) -> list[str]:
    """Where a host's keys for a controller's address differ from that controller's (only
    controllers that are not between their copy and their nvmet: ``keying``)."""
    wrong = []
    for instance_id, address in serving:
        if state.rotation is not None and state.rotation.stage(instance_id) in ("keying", "ctrl-keying"):
            continue
        held = json.loads(state.controller_secret(nqns, instance_id))
        for nqn in nqns:
            host_key, controller_key = path_keys(state.host_secret(nqn), address)
            if (host_key, controller_key) != (held["hosts"][nqn], held["controllerKey"]):
                wrong.append(f"{nqn} to {instance_id}")
    return wrong


def one_key_at_a_time(
    before: keys.ArrayKeys, after: keys.ArrayKeys, serving: list[tuple[str, str]], nqns: list[str]
) -> list[str]:
    """Where an action changed both keys a host's path to a controller uses (a live path
    re-authenticates one key at a time)."""
    both = []
    for nqn in nqns:
        for instance_id, address in serving:
            old = path_keys(before.host_secret(nqn), address)
            new = path_keys(after.host_secret(nqn), address)
            if old[0] != new[0] and old[1] != new[1]:
                both.append(f"{nqn} to {instance_id}")
    return both


def test_the_rotation_goes_controller_by_controller_then_promotes() -> None:
    before, _ = keys.converge(None, HOSTS[:2])
    state, began = before.begin_rotation()
    assert began
    serving = controllers(2)
    kinds = []
    while True:
        state, step = advance(state, serving)
        kinds.append((step.kind, step.instance_id))
        if step.kind == "promote":
            break
    first, second = serving[0][0], serving[1][0]
    # each controller in two halves, one key of each pair at a time: the hosts' keys, then the
    # controller key, each into nvmet and then through the hosts' paths
    assert kinds == [
        ("target", first),
        ("paths", first),
        ("target", first),
        ("paths", first),
        ("target", second),
        ("paths", second),
        ("target", second),
        ("paths", second),
        ("promote", ""),
    ]
    assert keys.rekey_step(state, serving).kind == "none"
    old = {before.controller_key, *before.hosts.values()}
    assert not old & {state.controller_key, *state.hosts.values()}


def test_asked_again_a_rotation_under_way_goes_on() -> None:
    state, _ = keys.converge(None, HOSTS[:1])
    rotating, _ = state.begin_rotation()
    rotating = rotating.at_stage("i-0c000000000000000", "keyed", "10.0.1.10")
    again, began = rotating.begin_rotation()
    assert not began
    assert again == rotating


def test_a_controller_left_keying_by_a_stopped_run_is_keyed_again() -> None:
    state, _ = keys.converge(None, HOSTS[:1])
    state, _ = state.begin_rotation()
    serving = controllers(1)
    state = state.at_stage(serving[0][0], "keying", serving[0][1])
    assert (keys.rekey_step(state, serving).kind, keys.rekey_step(state, serving).begin) == (
        "target",
        "keying",
    )
    state = state.at_stage(serving[0][0], "ctrl-keying", serving[0][1])
    assert (keys.rekey_step(state, serving).kind, keys.rekey_step(state, serving).begin) == (
        "target",
        "ctrl-keying",
    )


def test_the_keys_survive_the_secret_and_the_progress_the_registry() -> None:
    state, _ = keys.converge(None, HOSTS[:2])
    state, _ = state.begin_rotation()
    state = state.at_stage("i-0c000000000000000", "keyed", "10.0.1.10")
    # the secret holds the keys only: the progress moves 6 times a controller, and Secrets
    # Manager asks for no more than one new version of a secret every 10 minutes
    assert "i-0c000000000000000" not in state.as_secret()
    assert keys.ArrayKeys.from_secret(state.as_secret()).with_stages(state.stages()) == state
    # progress without a rotation in the secret (a rotation's end recorded there first) is ignored
    done = state.promoted()
    assert keys.ArrayKeys.from_secret(done.as_secret()).with_stages(state.stages()) == done


def test_a_stage_that_is_not_one_is_refused() -> None:
    state, _ = keys.converge(None, HOSTS[:1])
    state, _ = state.begin_rotation()
    with pytest.raises(keys.InvalidKeyError, match="stage"):
        state.with_stages({"i-0c000000000000000": {"stage": "half", "address": "10.0.1.10"}})


def test_a_host_copy_names_only_the_controllers_whose_nvmet_holds_the_new_keys() -> None:
    state, _ = keys.converge(None, HOSTS[:1])
    state, _ = state.begin_rotation()
    assert "paths" not in json.loads(state.host_secret(HOSTS[0]))
    keying = state.at_stage("i-0c000000000000000", "keying", "10.0.1.10")
    assert "paths" not in json.loads(keying.host_secret(HOSTS[0]))
    assert state.rotation is not None
    new = state.rotation.keys
    # the first half: the controller holds the host's new key with the old controller key, and
    # so does the host's path to it once nvmet holds them
    held = json.loads(keying.controller_secret(HOSTS[:1], "i-0c000000000000000"))
    assert held == {"controllerKey": state.controller_key, "hosts": {HOSTS[0]: new.hosts[HOSTS[0]]}}
    keyed = keying.at_stage("i-0c000000000000000", "keyed", "10.0.1.10")
    paths = json.loads(keyed.host_secret(HOSTS[0]))["paths"]
    assert paths == {"10.0.1.10": {"hostKey": new.hosts[HOSTS[0]], "controllerKey": state.controller_key}}
    # the second half: the new controller key, in nvmet first, then in the host's copy
    ctrl_keying = keyed.at_stage("i-0c000000000000000", "ctrl-keying", "10.0.1.10")
    held = json.loads(ctrl_keying.controller_secret(HOSTS[:1], "i-0c000000000000000"))
    assert held["controllerKey"] == new.controller_key
    assert json.loads(ctrl_keying.host_secret(HOSTS[0]))["paths"] == paths
    ctrl_keyed = ctrl_keying.at_stage("i-0c000000000000000", "ctrl-keyed", "10.0.1.10")
    assert json.loads(ctrl_keyed.host_secret(HOSTS[0]))["paths"]["10.0.1.10"] == {
        "hostKey": new.hosts[HOSTS[0]],
        "controllerKey": new.controller_key,
    }


def test_hosts_added_or_removed_mid_rotation_follow_in_both_generations() -> None:
    state, _ = keys.converge(None, HOSTS[:2])
    state, _ = state.begin_rotation()
    state, said = keys.converge(state, [HOSTS[1], HOSTS[2]])
    assert state.rotation is not None
    assert set(state.hosts) == set(state.rotation.keys.hosts) == {HOSTS[1], HOSTS[2]}
    assert "rotation's new keys follow the hosts" in said


@settings(max_examples=200, deadline=None)
@given(
    n_hosts=st.integers(min_value=0, max_value=4),
    initial=st.integers(min_value=1, max_value=4),
    events=st.lists(
        st.one_of(
            st.just(("act",)),
            st.tuples(st.just("join"), st.integers(0, 7)),
            st.tuples(st.just("leave"), st.integers(0, 7)),
            st.tuples(st.just("hosts"), st.integers(0, 4)),
        ),
        max_size=40,
    ),
)
def test_every_path_matches_its_controller_throughout_and_the_rotation_ends(
    n_hosts: int, initial: int, events: list[tuple[object, ...]]
) -> None:
    """Any interleaving of the rotation's actions with controllers joining (bootstrapped with
    the array's keys as they are) and leaving, and hosts changing: every host's keys for every
    settled controller match that controller's, each action changes one key of a settled path's
    pair at most (a live path re-authenticates one key at a time), and once the array stops
    changing, the rotation ends in at most 4 actions per controller plus the promotion, with no
    old key left."""
    nqns = HOSTS[:n_hosts]
    state, _ = keys.converge(None, nqns)
    old = {state.controller_key, *state.hosts.values()}
    state, _ = state.begin_rotation()
    pool = controllers(8)
    serving = pool[:initial]
    for event in events:
        if event[0] == "act":
            before = state
            state, _ = advance(state, serving)
            assert one_key_at_a_time(before, state, serving, nqns) == []
        elif event[0] == "join":
            joining = pool[int(event[1])]  # type: ignore[call-overload]
            if joining not in serving:
                serving = [*serving, joining]
        elif event[0] == "leave" and len(serving) > 1:
            serving = [c for c in serving if c != pool[int(event[1])]]  # type: ignore[call-overload]
        elif event[0] == "hosts":
            nqns = HOSTS[: int(event[1])]  # type: ignore[call-overload]
            state, _ = keys.converge(state, nqns)
        if state.rotation is not None:  # the keys being replaced, hosts added meanwhile included
            old |= {state.controller_key, *state.hosts.values()}
        assert consistent(state, serving, nqns) == []
        if state.rotation is None:
            break
    for _ in range(4 * len(serving) + 1):
        if state.rotation is None:
            break
        before = state
        state, _ = advance(state, serving)
        assert consistent(state, serving, nqns) == []
        assert one_key_at_a_time(before, state, serving, nqns) == []
    assert state.rotation is None
    assert keys.rekey_step(state, serving).kind == "none"
    now = {state.controller_key, *state.hosts.values()}
    for nqn in nqns:
        assert not set(json.loads(state.host_secret(nqn)).values()) & (old - now)
        assert "paths" not in json.loads(state.host_secret(nqn))
