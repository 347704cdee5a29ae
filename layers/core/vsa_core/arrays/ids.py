"""The ids an array's models share, as pydantic-annotated strings (pure).

Apart from ``spec`` so that a module which only needs an id type (``vsa_core.scaling.events``,
which ``on_iops_alarm`` parses its event with) does not build the spec's models when imported:
``spec`` re-exports them."""

from typing import Annotated

from pydantic import Field

from vsa_core.naming import ARRAY_ID_PATTERN

ArrayId = Annotated[
    str, Field(pattern=ARRAY_ID_PATTERN, description="lower-case letters, digits and '-', 3-32 chars")
]
VolumeId = Annotated[str, Field(pattern=r"^vol-[0-9a-f]{8,17}$", description="an EBS volume id")]
InstanceId = Annotated[str, Field(pattern=r"^i-[0-9a-f]{8,17}$", description="an EC2 instance id")]
Nqn = Annotated[
    str,
    Field(
        pattern=r"^nqn\.\d{4}-\d{2}\.[a-z0-9][a-z0-9.-]*(:[A-Za-z0-9._:-]+)?$",
        max_length=223,
        description="an NVMe Qualified Name, e.g. nqn.2014-08.org.nvmexpress:uuid:<uuid>",
    ),
]
