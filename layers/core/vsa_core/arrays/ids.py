"""The ids an array's models share, as pydantic-annotated strings (pure).

Apart from ``spec`` so that a module which only needs an id type (``vsa_core.scaling.events``,
whose ScaleRequest ``on_iops_alarm`` builds) does not build the spec's models when imported:
``spec`` re-exports them."""

from typing import Annotated

from pydantic import Field

from vsa_core.naming import ARRAY_ID_PATTERN

VOLUME_ID = r"vol-[0-9a-f]{8,17}"
"""An EBS volume id, as the documents' Volumes parameters take each item (tests/infra/test_documents.py)."""
NQN = r"nqn\.[0-9]{4}-[0-9]{2}\.[a-z0-9][a-z0-9.-]*(:[A-Za-z0-9._:-]+)?"
"""An NQN, as connect-path's HostNqn and configure-target's HostNqns take it (the same test).
[0-9], not \\d: pydantic's Rust regex reads \\d as any Unicode digit, which the documents refuse."""

ArrayId = Annotated[
    str, Field(pattern=ARRAY_ID_PATTERN, description="lower-case letters, digits and '-', 3-32 chars")
]
VolumeId = Annotated[str, Field(pattern=f"^{VOLUME_ID}$", description="an EBS volume id")]
InstanceId = Annotated[str, Field(pattern=r"^i-[0-9a-f]{8,17}$", description="an EC2 instance id")]
Nqn = Annotated[
    str,
    Field(
        pattern=f"^{NQN}$",
        max_length=223,
        description="an NVMe Qualified Name, e.g. nqn.2014-08.org.nvmexpress:uuid:<uuid>",
    ),
]
