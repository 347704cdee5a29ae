"""Who asked for a stored change (pure: no boto3), and the change as the registry keeps it.

A :class:`Caller` is read once, at the API's edge, from what API Gateway's IAM authorizer put in
the request context (``requestContext.identity``: the SigV4 signer's ``userArn``, ``accountId``,
``accessKey``, ``sourceIp``), never from a header or a body, which the caller writes. A change
the deployment makes on its own names its source instead of a person: a scheduled backup (and
the retention it runs) names the array's EventBridge Scheduler schedule (``schedule:<name>``).

Every stored change (an apply, a delete, a keys rotation, a backup set, a restore, a set deleted
by request or by retention) records its caller: the backup set in itself, the others as a
:class:`ChangeRecord` in the array's history (``arrays.aws_registry.ArrayHistory``).
"""

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from vsa_core.errors import VsaError

CallerKind = Literal["iam", "schedule"]
ChangeKind = Literal["apply", "delete", "rotate-keys", "backup", "restore", "delete-backup", "prune"]


class CallerUnknownError(VsaError):
    """A change was asked without an IAM caller in the request context (API Gateway's IAM
    authorization puts one in every request it lets through): refused (403), nothing stored."""


class _Strict(BaseModel):
    # built at first use (defer_build): most handlers only carry these through the registry
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, defer_build=True)


class Caller(_Strict):
    """Who asked: an IAM principal (``arn`` its ARN, as API Gateway verified the signature) or
    the deployment's own schedule (``arn`` the schedule's name)."""

    kind: CallerKind = "iam"
    arn: str = Field(min_length=1, description="the IAM principal's ARN, or the schedule's name")
    account: str | None = None
    access_key_id: str | None = Field(default=None, alias="accessKeyId")
    source_ip: str | None = Field(default=None, alias="sourceIp")

    @property
    def principal(self) -> str:
        """What the timeline shows: the ARN, or ``schedule:<name>``."""
        return self.arn if self.kind == "iam" else f"{self.kind}:{self.arn}"

    @classmethod
    def schedule(cls, name: str) -> "Caller":
        return cls(kind="schedule", arn=name)


def caller_of(identity: Mapping[str, Any] | None) -> Caller:
    """The caller API Gateway's IAM authorization verified (``requestContext.identity``);
    ``CallerUnknownError`` when it names no principal."""
    identity = identity or {}
    arn = identity.get("userArn")
    if not isinstance(arn, str) or not arn.startswith("arn:"):
        raise CallerUnknownError(
            "the request carries no IAM caller (requestContext.identity.userArn): call the API "
            "through API Gateway with SigV4-signed requests"
        )

    def text(key: str) -> str | None:
        value = identity.get(key)
        return value if isinstance(value, str) and value else None

    return Caller(
        arn=arn, account=text("accountId"), access_key_id=text("accessKey"), source_ip=text("sourceIp")
    )


class ChangeRecord(_Strict):
    """One stored change of an array and who asked for it. ``reference``: what to look up for
    more (the spec version ``v3``, the DeleteArray or ReconcileArray run, the backup set)."""

    at: AwareDatetime
    kind: ChangeKind
    what: str
    reference: str | None = None
    by: Caller
