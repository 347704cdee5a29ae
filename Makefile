# VSA control plane. The two commands of the README:
#   make demo   install everything, start the local cloud, deploy, run the product's main job
#   make test   install everything, lint, type-check, validate, unit + integration tests
# The inner loop: make check (lint, types, unit, infra, workflow tests; a few minutes).
SHELL := /bin/bash
VENV := $(CURDIR)/.venv/bin
PORT ?= 4566
# Clients (SAM CLI, tests, demo) reach the local cloud with throw-away credentials.
LOCAL := env PATH="$(VENV):$$PATH" VSA_LOCALCLOUD_PORT=$(PORT) AWS_ENDPOINT_URL=http://127.0.0.1:$(PORT) \
	AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1 \
	SAM_CLI_TELEMETRY=0 PYTHONPATH=$(CURDIR)/layers/core
OFFLINE := env -u AWS_ENDPOINT_URL PATH="$(VENV):$$PATH" AWS_DEFAULT_REGION=us-east-1 SAM_CLI_TELEMETRY=0

.PHONY: demo test check install localcloud-start localcloud-stop localcloud-logs build deploy-local \
	lint format typecheck validate security unit explore documents dataplane dataplane-auth integration bench bench-lifecycle bench-backups bench-ownership dataplane-fencing-runs dataplane-soak \
	bench-coldstart bench-arrays bench-keys bench-failover docs clean

demo: install
	@$(LOCAL) bash tools/demo.sh

test: install
	@$(LOCAL) bash tools/test.sh

check: install
	@$(LOCAL) bash tools/check.sh

install:
	@bash tools/install.sh

localcloud-start: install
	@$(LOCAL) tools/localcloud.sh start

localcloud-stop:
	@$(LOCAL) tools/localcloud.sh stop

localcloud-logs:
	@$(LOCAL) tools/localcloud.sh logs

build: install
	@$(LOCAL) sam build --config-env local

deploy-local: build localcloud-start
	@$(LOCAL) bash tools/deploy-local.sh

lint: install
	$(VENV)/ruff check .
	$(VENV)/ruff format --check .

format: install
	$(VENV)/ruff check --fix .
	$(VENV)/ruff format .

typecheck: install
	$(VENV)/mypy layers/core functions cli tools/localcloud/vsa_localcloud
	$(VENV)/mypy --python-version 3.10 documents/lib

validate: install
	$(OFFLINE) sam validate --lint

# checkov, parliament and cloudsplaining on the template against tools/security-baseline.yaml
# (docs/security.md; --write-baseline to regenerate it, keeping the reasons).
security: install
	$(OFFLINE) $(VENV)/python tools/security_gate.py

unit: install
	$(OFFLINE) $(VENV)/python -m pytest tests/unit tests/infra

# The property tests with fresh examples, twenty times as many as the test command's fixed ones
# (tests/conftest.py); what fails is kept in .hypothesis/ and replayed by the next explore.
explore: install
	$(OFFLINE) env VSA_HYPOTHESIS=explore $(VENV)/python -m pytest -n 2 tests/unit

# The documents without the local cloud: freeze-io/thaw-io on real XFS on loop devices (root),
# the rendered controller/host scripts on sandbox directories with the fake nvme and modprobe.
documents: install
	$(OFFLINE) $(VENV)/python -m pytest tests/documents/test_freeze_thaw.py tests/documents/test_documents_format.py tests/documents/test_scripts_local.py

# The documents on real Linux kernels: QEMU guests (TCG), controllers + a host, NVMe/TCP with
# native multipath, fio and XFS, stale writes and fencing, authentication, backup sets
# (tests/dataplane; make test runs it beside the unit tests; figures in .dataplane/figures.json).
dataplane: install
	$(OFFLINE) $(VENV)/python -m pytest tests/dataplane

# DH-HMAC-CHAP on the 6.12 kernel alone: keyed, keyless and wrong-key hosts, a wrong controller
# key, key rotation under IO, connect time and IOPS with and without (its own lab; about 7 min
# under TCG here; make test and make dataplane run it with the rest of the tier).
dataplane-auth: install
	$(OFFLINE) $(VENV)/python -m pytest tests/dataplane/test_authentication.py

# Failover settings on real kernels (the QEMU tier's lab: 2 controllers, 1 host): per setting,
# the IO stall under fio verify when a controller's link is cut, its guest frozen or killed,
# false failovers with no fault, reconnects; a table (figures, not a test; ~8 min per setting).
bench-failover: install
	$(OFFLINE) $(VENV)/python tools/bench_failover.py

# One owner per volume against round-robin on real kernels (the QEMU tier's lab: 2 controllers,
# 2 volumes, 1 host): IOPS per volume and per array, rounds alternated (figures, not a test).
bench-ownership: install
	$(OFFLINE) $(VENV)/python tools/bench_ownership.py

# Fence-then-promote run after run on one lab (the stale-write scenario with a stand-in fence that
# can be undone); every run appended to .dataplane/fencing-runs.jsonl, the count over all of them.
RUNS ?= 50
dataplane-fencing-runs: install
	$(OFFLINE) $(VENV)/python tools/fencing_runs.py --runs $(RUNS)

# The guests under unpaced megabyte NVMe/TCP traffic, fresh lab each run: whether a guest's kernel
# dies under this machine's QEMU (figures, not a test; .dataplane/soak-runs.jsonl).
SOAK_RUNS ?= 3
SOAK_SECONDS ?= 180
dataplane-soak: install
	$(OFFLINE) $(VENV)/python tools/dataplane_soak.py --runs $(SOAK_RUNS) --seconds $(SOAK_SECONDS)

integration: install
	@$(LOCAL) $(VENV)/python -m pytest tests/integration

# Planner vs oracle vs static-for-peak on traces/*.csv: prints figures (not a test, nothing timed).
bench: install
	$(OFFLINE) PYTHONPATH=$(CURDIR)/layers/core:$(CURDIR) nice -n 10 $(VENV)/python tools/bench.py

# The freeze window of application-consistent backups (16 and 64 volumes, 4 hosts, 20 runs each),
# through the local cloud with the stack deployed (make deploy-local) and real XFS (root): figures.
bench-backups: install
	@$(LOCAL) $(VENV)/python tools/bench_backups.py

# The controller workflows' own overhead (time not spent waiting on AWS), 4 vol x 2 hosts
# against 16 vol x 8 hosts, on the local cloud (left running; make localcloud-stop).
bench-lifecycle: deploy-local
	@$(LOCAL) $(VENV)/python tools/bench_lifecycle.py

# Every handler's cold import against a bare `import boto3`, fresh processes in the runtime venv
# with the layer as sam build builds it and no bytecode writing (as on Lambda): figures.
bench-coldstart: build
	$(OFFLINE) $(VENV)/python tools/bench_coldstart.py

# The apply's key writes for many hosts: one at a time against aws_keys.WRITERS at once, moto with
# an assumed Secrets Manager round trip (figures, not a test).
bench-keys: install
	$(OFFLINE) $(VENV)/python tools/bench_keys.py

# Many arrays per deployment: each event's registry reads and time at 10 and 1,000 arrays, on the
# local cloud's DynamoDB (a table of its own, deleted after; the local cloud is left running).
bench-arrays: localcloud-start
	@$(LOCAL) $(VENV)/python tools/bench_arrays.py

# The generated reference: openapi.json from the handlers, then docs/configuration.md (template.yaml's
# parameters, the spec model) and docs/api.md (openapi.json); tests/infra/test_reference_docs.py
# fails while a page differs from what this writes.
docs: install
	$(OFFLINE) $(VENV)/python tools/openapi.py
	$(OFFLINE) $(VENV)/python tools/configuration_doc.py

clean:
	rm -rf .aws-sam .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
