"""Plux plugin that registers the host-process Lambda executor under the name ``process``.

Select it with ``LAMBDA_RUNTIME_EXECUTOR=process``. Kept separate from the executor module so
that loading the plugin index does not import LocalStack's Lambda internals.
"""

from typing import Any

from localstack.services.lambda_.invocation.plugins import RuntimeExecutorPlugin


class ProcessRuntimeExecutorPlugin(RuntimeExecutorPlugin):
    name = "process"

    def load(self, *args: Any, **kwargs: Any) -> type:
        from vsa_localcloud.process_executor import ProcessRuntimeExecutor

        return ProcessRuntimeExecutor
