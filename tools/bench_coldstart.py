"""Cold import of every handler against a bare ``import boto3``, in fresh processes.

    make bench-coldstart   # sam build, then this; or: .venv/bin/python tools/bench_coldstart.py [--runs 5]

What a Lambda cold start pays before its first invocation is the import of the handler module.
This starts one fresh process per sample with the interpreter of the local cloud's runtime venv
(``.localcloud/runtime-venv``: Python 3.13 with what the Lambda python3.13 runtime holds, i.e.
boto3; tools/install.sh), in the runtime's environment:

* the function's code and the core layer exactly as ``sam build`` builds them
  (``.aws-sam/build/<Function>``, ``.aws-sam/build/CoreLayer/python``), in Lambda's order on
  ``sys.path``: the function (``/var/task``), then the layer (``/opt/python``), then the
  runtime's own packages (so a botocore in the layer shadows the runtime's, as on AWS);
* ``PYTHONDONTWRITEBYTECODE=1``: ``/opt`` and ``/var/task`` are read-only on Lambda, so whatever
  ships without bytecode is compiled from source on every cold start, and here too;
* the variables Lambda sets (``LAMBDA_TASK_ROOT``, ``AWS_LAMBDA_FUNCTION_NAME``, …) and the
  template's ``Globals`` ones (powertools' service, namespace, log level).

Each process times ``import <handler module>`` with ``time.perf_counter`` (interpreter start-up
excluded, the same for all), and the CPU time the import took (``time.process_time``): on a
shared, busy machine the wall time also counts the waits for a core, the CPU time does not, so
its ratio is the steadier of the two. The baseline is ``import boto3`` in the same interpreter
with the same environment and no function or layer. Samples are interleaved (one of every target
per round) so a noisy neighbour spreads over all of them. A last figure per handler, "+tracer",
is the same import followed by the first use of the tracer (what the first invocation pays when
tracing is active, as on AWS: the X-Ray SDK's import and its patching of botocore).

With ``--against <other build>`` (e.g. ``sam build --build-dir`` of the commit before a change)
the other build's functions are sampled in the same rounds, each next to its counterpart, and
reported first: on a shared machine, a before and an after taken one after the other differ by
the neighbours' load more than by the change.

Prints, per function: median and worst cold import, the median's and the worst's ratio to the
baseline's median, and the median CPU time's ratio to the baseline's; the target is a median of
at most 1.5x the bare ``import boto3``. Prints figures; nothing is asserted (the machines here
are shared and noisy).
"""

import argparse
import importlib.util
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / ".aws-sam" / "build"
RUNTIME_PYTHON = ROOT / ".localcloud" / "runtime-venv" / "bin" / "python"
TARGET_RATIO = 1.5
# What the python3.13 runtime provides (requirements/lambda-runtime.txt), as import names.
RUNTIME_PACKAGES = {"boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six.py"}

# One sample: import the module, print the seconds it took, wall and CPU (then, with a second
# argument, the wall seconds the first use of the tracer took on top).
PROBE = """
import sys, time
t0, c0 = time.perf_counter(), time.process_time()
__import__(sys.argv[1])
t1, c1 = time.perf_counter(), time.process_time()
if len(sys.argv) > 2:
    from vsa_core.observability import tracer
    tracer.provider
print(t1 - t0, c1 - c0, time.perf_counter() - t1)
"""


class _CfnLoader(yaml.SafeLoader):
    """Reads CloudFormation short-form tags (!Ref, !GetAtt, …) as plain values."""


def _tag(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)  # type: ignore[arg-type]


_CfnLoader.add_multi_constructor("!", _tag)


def built_functions(build: Path) -> list[tuple[str, Path, str]]:
    """(logical id, built code directory, handler module) of every function in the built template."""
    # _CfnLoader is a SafeLoader that only adds the CloudFormation tags
    template = yaml.load((build / "template.yaml").read_text(), Loader=_CfnLoader)  # noqa: S506
    found = []
    for name, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        props = resource["Properties"]
        module = props["Handler"].rsplit(".", 1)[0]
        found.append((name, build / props["CodeUri"], module))
    return sorted(found)


def layer_summary(build: Path) -> str:
    """What the built layer holds that matters here: runtime packages shadowed, source without bytecode."""
    layer = build / "CoreLayer" / "python"
    shadowing = sorted(p.name for p in layer.iterdir() if p.name in RUNTIME_PACKAGES)
    sources = list(layer.rglob("*.py"))
    compiled = [p for p in sources if Path(importlib.util.cache_from_source(str(p))).is_file()]
    return (
        f"layer {layer}: {len(sources)} .py, {len(compiled)} with bytecode for this "
        f"Python; runtime packages in it: {', '.join(shadowing) or 'none'}"
    )


def environment(build: Path, code: Path | None, function: str | None) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
        "POWERTOOLS_SERVICE_NAME": "vsa-control-plane",
        "POWERTOOLS_METRICS_NAMESPACE": "VSA",
        "POWERTOOLS_LOG_LEVEL": "INFO",
        "VSA_TABLE_NAME": "bench",
    }
    if code is not None and function is not None:
        layer = build / "CoreLayer" / "python"
        env |= {
            "PYTHONPATH": f"{code}:{layer}",
            "LAMBDA_TASK_ROOT": str(code),
            "AWS_LAMBDA_FUNCTION_NAME": function,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
        }
    return env


def sample(module: str, env: dict[str, str], cwd: Path, tracer: bool) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds) of the import, and the wall seconds of the tracer's first use."""
    args = [str(RUNTIME_PYTHON), "-c", PROBE, module] + (["tracer"] if tracer else [])
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, check=False)  # noqa: S603
    if done.returncode != 0:
        sys.exit(f"{module}: the import failed:\n{done.stderr}")
    imported, cpu, first_use = done.stdout.split()
    return float(imported), float(cpu), float(first_use)


class Samples:
    """One build's samples: per function, the import's wall and CPU seconds and the traced total."""

    def __init__(self, build: Path) -> None:
        self.build = build
        self.functions = built_functions(build)
        self.imports: dict[str, list[float]] = {name: [] for name, _, _ in self.functions}
        self.cpus: dict[str, list[float]] = {name: [] for name, _, _ in self.functions}
        self.traced: dict[str, list[float]] = {name: [] for name, _, _ in self.functions}

    def take(self, name: str, code: Path, module: str) -> None:
        env = environment(self.build, code, name)
        wall, cpu, _ = sample(module, env, code, tracer=False)
        self.imports[name].append(wall)
        self.cpus[name].append(cpu)
        imported, _, first_use = sample(module, env, code, tracer=True)
        self.traced[name].append(imported + first_use)


def report(
    samples: Samples, title: str, baseline: list[float], baseline_cpu: list[float]
) -> dict[str, list[str]]:
    """Prints the table of one build; answers which functions are over the target, by figure."""
    base = statistics.median(baseline)
    base_cpu = statistics.median(baseline_cpu)
    table = Table(title=title)
    columns = ["target", "median s", "worst s", "median / boto3", "worst / boto3", "CPU / boto3's"]
    columns.append("+tracer median s")
    for column in columns:
        table.add_column(column, justify="left" if column == "target" else "right")
    cpu_cell = f"1.00 ({base_cpu:.3f} s)"
    table.add_row("import boto3 (bare)", f"{base:.3f}", f"{max(baseline):.3f}", "1.00", "", cpu_cell, "")
    over: dict[str, list[str]] = {"median": [], "median CPU time": []}
    for name, _, module in samples.functions:
        imports = samples.imports[name]
        ratio = statistics.median(imports) / base
        cpu_ratio = statistics.median(samples.cpus[name]) / base_cpu
        if ratio > TARGET_RATIO:
            over["median"].append(name)
        if cpu_ratio > TARGET_RATIO:
            over["median CPU time"].append(name)
        table.add_row(
            f"{name} ({module})",
            f"{statistics.median(imports):.3f}",
            f"{max(imports):.3f}",
            f"{ratio:.2f}",
            f"{max(imports) / base:.2f}",
            f"{cpu_ratio:.2f}",
            f"{statistics.median(samples.traced[name]):.3f}",
        )
    Console(width=170).print(table)
    print(layer_summary(samples.build))
    return over


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per target (default 5)")
    parser.add_argument("--build", type=Path, default=BUILD, help="sam build output (.aws-sam/build)")
    parser.add_argument(
        "--against",
        type=Path,
        help="another sam build output (e.g. of the commit before a change), sampled in the same rounds",
    )
    args = parser.parse_args(argv)
    builds = [args.build.resolve()] + ([args.against.resolve()] if args.against else [])
    for build in builds:
        if not (build / "template.yaml").is_file():
            sys.exit(f"no {build}/template.yaml: run `sam build` (make build) first")
    if not RUNTIME_PYTHON.is_file():
        sys.exit(f"no {RUNTIME_PYTHON}: run `make install` first")

    every = [Samples(build) for build in builds]
    baseline: list[float] = []
    baseline_cpu: list[float] = []
    console = Console(stderr=True)
    with console.status("sampling") as status:
        for run in range(args.runs):
            status.update(f"round {run + 1} of {args.runs}")
            wall, cpu, _ = sample("boto3", environment(builds[0], None, None), ROOT, tracer=False)
            baseline.append(wall)
            baseline_cpu.append(cpu)
            # one of every target per round, the two builds' samples of a function side by side
            for name, code, module in every[0].functions:
                every[0].take(name, code, module)
                for other in every[1:]:
                    found = [(c, m) for n, c, m in other.functions if n == name]
                    if found:
                        other.take(name, *found[0])

    title = f"Cold import, {args.runs} fresh processes each (Python 3.13, no bytecode writing)"
    if args.against:
        report(every[1], f"{title}: {builds[1]} (--against)", baseline, baseline_cpu)
        title += f": {builds[0]}"
    over = report(every[0], title, baseline, baseline_cpu)
    for figure, names in over.items():
        verdict = "every handler within" if not names else f"over the target: {', '.join(names)}"
        print(f"target: {figure} <= {TARGET_RATIO}x bare import boto3's: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
