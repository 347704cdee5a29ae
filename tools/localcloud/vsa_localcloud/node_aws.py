"""The AWS CLI of the local cloud's managed nodes, for what the documents ask of it:

    aws secretsmanager get-secret-value --secret-id ID --query SecretString --output text

(``documents/lib/dhchap.sh``, run as the documents' ``AwsCommand``). It calls the local cloud
with boto3 and the node's environment (``AWS_ENDPOINT_URL``, ``AWS_REGION``, the instance role's
credentials that ``ssm_commands`` hands to each invocation) and answers as the AWS CLI v2 does:

* the secret's ``SecretString`` and a newline on stdout, exit 0 (``None`` for a secret that has
  only a ``SecretBinary``, as ``--query SecretString --output text`` prints it);
* a service error: ``\\nAn error occurred (<Code>) when calling the GetSecretValue operation:
  <Message>\\n`` on stderr, exit 254;
* no credentials: ``\\nUnable to locate credentials. You can configure credentials by running
  "aws configure".\\n``, exit 253 (no region likewise: ``You must specify a region. …``);
* anything it does not answer (another command, option, query or output): a usage error, exit
  252; the endpoint unreachable or another client-side failure: exit 255.

(Return codes: "Command line return codes in the AWS CLI",
https://docs.aws.amazon.com/cli/latest/userguide/cli-usage-returncodes.html.) The same contract as
the document tests' stand-in, tests/fakes/aws. The local cloud has no instance metadata service:
the SDK is told not to look for one (``AWS_EC2_METADATA_DISABLED``), so a node without
credentials fails at once instead of calling 169.254.169.254. Run through the wrapper the local
cloud writes at start (``instance_roles.write_node_cli``). Imports no LocalStack module.
"""

from __future__ import annotations

import os
import sys

USAGE = 252
CONFIGURATION_ERROR = 253  # no credentials, no region
SERVICE_ERROR = 254
CLIENT_ERROR = 255
OPTIONS = ("--secret-id", "--query", "--output")
USAGE_TEXT = (
    "usage: aws [options] <command> <subcommand> [<subcommand> ...] [parameters]\n"
    "To see help text, you can run:\n\n"
    "  aws help\n  aws <command> help\n  aws <command> <subcommand> help\n\n"
)
NO_CREDENTIALS_TEXT = (
    'Unable to locate credentials. You can configure credentials by running "aws configure".'
)
NO_REGION_TEXT = 'You must specify a region. You can also configure your region by running "aws configure".'


def _options(argv: list[str]) -> dict[str, str] | str:
    """``--name value`` or ``--name=value`` pairs; an error text when they are not."""
    options: dict[str, str] = {}
    rest = list(argv)
    while rest:
        word = rest.pop(0)
        name, equals, value = word.partition("=")
        if name not in OPTIONS:
            return f"Unknown options: {word}"
        if not equals:
            if not rest:
                return f"argument {name}: expected one argument"
            value = rest.pop(0)
        options[name] = value
    return options


def get_secret_value(argv: list[str]) -> tuple[int, str, str]:
    options = _options(argv)
    if isinstance(options, str):
        return USAGE, "", f"{USAGE_TEXT}aws: error: {options}\n"
    if "--secret-id" not in options:
        return USAGE, "", f"{USAGE_TEXT}aws: error: the following arguments are required: --secret-id\n"
    if (options.get("--query"), options.get("--output")) != ("SecretString", "text"):
        return USAGE, "", "the local cloud's node aws answers --query SecretString --output text only\n"

    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    try:
        # the CLI v2's retry mode (standard: 3 attempts); the endpoint from AWS_ENDPOINT_URL
        client = boto3.client(
            "secretsmanager", region_name=region, config=Config(retries={"mode": "standard"})
        )
        reply = client.get_secret_value(SecretId=options["--secret-id"])
    except NoCredentialsError:
        return CONFIGURATION_ERROR, "", f"\n{NO_CREDENTIALS_TEXT}\n"
    except NoRegionError:
        return CONFIGURATION_ERROR, "", f"\n{NO_REGION_TEXT}\n"
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code, message = error.get("Code", "Unknown"), error.get("Message", "")
        return (
            SERVICE_ERROR,
            "",
            f"\nAn error occurred ({code}) when calling the GetSecretValue operation: {message}\n",
        )
    except BotoCoreError as exc:
        return CLIENT_ERROR, "", f"\n{exc}\n"
    return 0, f"{reply.get('SecretString')}\n", ""


def main(argv: list[str]) -> int:
    if argv[:2] == ["secretsmanager", "get-secret-value"]:
        code, out, err = get_secret_value(argv[2:])
    else:
        code, out, err = (
            USAGE,
            "",
            f"{USAGE_TEXT}the local cloud's node aws answers secretsmanager get-secret-value only: {argv}\n",
        )
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
