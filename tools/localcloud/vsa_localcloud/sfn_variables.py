"""Variable references in JSONPath states read in Python, not through the JVM.

AWS Step Functions Developer Guide, "Passing data between states with variables"
(https://docs.aws.amazon.com/step-functions/latest/dg/workflow-variables.html): in a JSONPath
state a variable is referenced as ``$name`` (a field of its value as ``$name.field``, an element
as ``$name[0]``), in the same places a ``.$`` field or a Choice rule's ``Variable`` takes a
JSONPath on the state's input. On AWS such a read costs nothing measurable.

LocalStack evaluates every such reference as a JSONata expression in its JVM (JPype), preceded by
a declaration of *every* variable in scope, serialised (``StringVariableSample._eval_body``: "this
could be optimised by sampling only those invoked"). A workflow that keeps a few kilobytes in
variables (ConsistentBackup's ``$ctx`` with its volumes and hosts, ``$freezing`` with the hosts'
presigned URLs) then spends tens of milliseconds per reference, and a state with eight references
close to a second: a backup's Snapshot state waited a second between being entered and invoking
its Lambda, inside the hosts' freeze window, on a quiet machine.

Here a JSONPath-mode reference that is a variable name followed by plain ``.field`` and ``[n]``
steps is resolved from the variable store with LocalStack's own JSONPath (the same
``extract_json`` its ``$.field`` paths use). Anything else (a JSONata state, a path with
wildcards, filters or slices, an unknown variable, a missing field) takes LocalStack's own
evaluation, errors included. Pinned by tests/localcloud/test_stepfunctions.py.
"""

import copy
import logging
import re
from typing import Any

from localstack.utils.patch import patch

LOG = logging.getLogger(__name__)

SIMPLE_REFERENCE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z_][A-Za-z0-9_]*|\[[0-9]+\])*)")
"""``$name`` then ``.field`` / ``[n]`` steps: the references read here."""

_MISSING = object()


def resolve(variables: Any, expression: str) -> Any:
    """The value ``expression`` names in ``variables`` (a VariableStore); ``_MISSING`` when it is
    not a simple reference or does not resolve (LocalStack's own evaluation then decides)."""
    from localstack.services.stepfunctions.asl.utils.json_path import extract_json

    match = SIMPLE_REFERENCE.fullmatch(expression)
    if match is None:
        return _MISSING
    name, steps = match.groups()
    try:
        value = variables.get(name)
        return copy.deepcopy(extract_json("$" + steps, value) if steps else value)
    except Exception:  # noqa: BLE001 - unknown variable or missing field: LocalStack's own error
        return _MISSING


def install() -> None:
    from localstack.services.stepfunctions.asl.component.common.query_language import QueryLanguageMode
    from localstack.services.stepfunctions.asl.component.common.string.string_expression import (
        StringVariableSample,
    )

    @patch(StringVariableSample._eval_body)
    def _eval_body(fn: Any, self: Any, env: Any) -> None:
        if self.query_language_mode == QueryLanguageMode.JSONPath:
            value = resolve(env.variable_store, self.expression)
            if value is not _MISSING:
                env.stack.append(value)
                return
            LOG.debug("%s: read by LocalStack's JSONata", self.expression)
        fn(self, env)
