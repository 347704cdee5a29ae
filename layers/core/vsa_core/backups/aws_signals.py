"""The freeze window's signals on S3 (``vsa_core.backups.signals`` says what they are): the URLs
the hosts use, presigned by this role (hosts need no grant of their own), the hosts' frozen
reports listed and read, the thaw marker written, a backup's markers cleared."""

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from vsa_core.backups import signals
from vsa_core.clients import RETRY_CONFIG
from vsa_core.observability import logger

READERS = 16
"""Frozen reports read at once, after the snapshot (off the freeze window's path)."""


@cache
def s3_client() -> Any:
    """S3 with Signature Version 4: buckets created since June 2020 refuse version 2, which
    botocore still presigns with by default."""
    return boto3.client("s3", config=RETRY_CONFIG.merge(Config(signature_version="s3v4")))


@dataclass(frozen=True)
class Signals:
    bucket: str
    s3: Any

    def parameters(
        self, array_id: str, backup_id: str, instance_ids: Iterable[str], freeze_timeout: int
    ) -> dict[str, dict[str, str]]:
        """freeze-io's ThawSignal, FrozenSignal and SignalPollMilliseconds for each host (one thaw
        marker for all, polled as often as S3's rate on one key allows for that many hosts)."""
        seconds = signals.url_seconds(freeze_timeout)
        thaw = self._presign("get_object", signals.thaw_key(array_id, backup_id), seconds)
        instances = list(instance_ids)
        poll = str(signals.poll_milliseconds(len(instances)))
        return {
            instance: {
                "ThawSignal": signals.as_parameter(thaw),
                "SignalPollMilliseconds": poll,
                "FrozenSignal": signals.as_parameter(
                    self._presign("put_object", signals.host_key(array_id, backup_id, instance), seconds)
                ),
            }
            for instance in instances
        }

    def _presign(self, operation: str, key: str, seconds: int) -> str:
        return str(
            self.s3.generate_presigned_url(
                operation, Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=seconds
            )
        )

    def reported(self, array_id: str, backup_id: str) -> set[str] | None:
        """The hosts whose frozen report has arrived (one listing: every host of the backup).
        None when S3 cannot be read (logged): Run Command's status decides, as without signals;
        a backup never fails for want of its signals."""
        keys: list[str] = []
        pages = self.s3.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=signals.backup_prefix(array_id, backup_id)
        )
        try:
            for page in pages:
                keys += [item["Key"] for item in page.get("Contents", [])]
        except (ClientError, BotoCoreError):
            logger.warning(
                "frozen reports not listed: Run Command's status decides", extra={"backup_id": backup_id}
            )
            return None
        return signals.reported_hosts(keys, array_id, backup_id)

    def reports(self, array_id: str, backup_id: str, instance_ids: Iterable[str]) -> Mapping[str, str]:
        """Each reported host's freeze-io report line, as it PUT it."""

        def read(instance: str) -> tuple[str, str]:
            key = signals.host_key(array_id, backup_id, instance)
            body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
            return instance, body.decode(errors="replace")

        hosts = list(instance_ids)
        with ThreadPoolExecutor(max_workers=max(1, min(READERS, len(hosts)))) as pool:
            return dict(pool.map(read, hosts))

    def thaw(self, array_id: str, backup_id: str, requested_at: float, returned_at: float) -> bool:
        """Write the thaw marker; False (logged) if S3 refused: thaw-io, sent next, thaws."""
        try:
            self.s3.put_object(
                Bucket=self.bucket,
                Key=signals.thaw_key(array_id, backup_id),
                Body=signals.thaw_marker(backup_id, requested_at, returned_at),
                ContentType="application/json",
            )
        except (ClientError, BotoCoreError):
            logger.exception("thaw marker not written: thaw-io thaws", extra={"backup_id": backup_id})
            return False
        return True

    def clear(self, array_id: str, backup_id: str) -> None:
        """Delete a backup's markers (best effort: the bucket's lifecycle expires them in a day)."""
        try:
            pages = self.s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=signals.backup_prefix(array_id, backup_id)
            )
            keys = [{"Key": item["Key"]} for page in pages for item in page.get("Contents", [])]
            for start in range(0, len(keys), 1000):
                self.s3.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": keys[start : start + 1000], "Quiet": True}
                )
        except (ClientError, BotoCoreError):
            logger.warning("signals not cleared: they expire in a day", extra={"backup_id": backup_id})


def signals_of(bucket: str) -> Signals | None:
    """The signals of the deployment's bucket; None without one (the workflow then goes by
    Run Command's status alone)."""
    return Signals(bucket, s3_client()) if bucket else None
