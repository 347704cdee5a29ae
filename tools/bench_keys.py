"""The apply's key writes for many hosts (issue #20): how long ``aws_keys.converge`` takes to store
the keys of a new array of N hosts (the array's secret and one copy per host), written one at a
time against ``aws_keys.WRITERS`` at once.

    make bench-keys

moto's Secrets Manager and KMS in-process, with a fixed round trip added to every Secrets Manager
call (``--latency``, 0.1 s by default: an assumption about AWS, not a measurement of it; moto alone
answers in about a millisecond). Host counts up to the most that fit one secret during a
rotation (``keys.size_problem``: 242 with uuid NQNs). Prints each count's seconds both ways and the
ratio, against API Gateway's 29 s; asserts nothing (the machines here are shared).
"""

import argparse
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "layers" / "core"), str(ROOT)]
for name, value in {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}.items():
    os.environ[name] = value
os.environ.pop("AWS_ENDPOINT_URL", None)

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402

from vsa_core.arrays import aws_keys  # noqa: E402
from vsa_core.arrays.spec import ArraySpec  # noqa: E402

NQN_PREFIX = "nqn.2014-08.org.nvmexpress:uuid:"


def spec(array_id: str, hosts: int) -> ArraySpec:
    return ArraySpec.model_validate(
        {
            "arrayId": array_id,
            "availabilityZone": "us-east-1a",
            "controllers": {"launchTemplate": {"launchTemplateName": "bench-controllers"}},
            "perControllerIops": 100_000,
            "minControllers": 2,
            "maxControllers": 4,
            "volumes": [{"volumeId": "vol-0a1b2c3d4e5f60001"}],
            "hosts": [
                {"instanceId": f"i-{i:017x}", "hostNqn": f"{NQN_PREFIX}{uuid.UUID(int=i)}"}
                for i in range(hosts)
            ],
        }
    )


def timed(clients: aws_keys.KeysClients, array_id: str, hosts: int, writers: int) -> tuple[float, int]:
    aws_keys.WRITERS = writers
    started = time.perf_counter()
    changes = aws_keys.converge(clients, spec(array_id, hosts), [])
    return time.perf_counter() - started, len(changes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--latency", type=float, default=0.1, help="seconds added to each Secrets Manager call"
    )
    parser.add_argument("--hosts", type=int, nargs="+", default=[16, 64, 128, 242])
    args = parser.parse_args()
    chosen = aws_keys.WRITERS
    with mock_aws():
        secrets = boto3.client("secretsmanager")

        def slow(**_: Any) -> None:
            time.sleep(args.latency)

        secrets.meta.events.register("before-send.secrets-manager.*", slow)
        key = boto3.client("kms").create_key()["KeyMetadata"]["Arn"]
        clients = aws_keys.keys_clients(secrets, key, key, "us-east-1")
        print(f"Secrets Manager round trip {args.latency:.3f} s (assumed); API Gateway gives up at 29 s")
        print(f"{'hosts':>6} {'secrets':>8} {'1 at a time':>12} {f'{chosen} at once':>10} {'ratio':>6}")
        for n, hosts in enumerate(args.hosts):
            one, written = timed(clients, f"seq{n}", hosts, 1)
            many, _ = timed(clients, f"par{n}", hosts, chosen)
            print(f"{hosts:>6} {written:>8} {one:>11.1f}s {many:>9.1f}s {one / many:>5.1f}x")
    aws_keys.WRITERS = chosen


if __name__ == "__main__":
    main()
