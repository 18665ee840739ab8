# The README's two commands: `make demo` and `make test`. Both set everything up first.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PY_COLORS := 0
export ANSIBLE_FORCE_COLOR := 0
STAGE := tools/setup/stage.sh

.PHONY: help setup demo demo-oom demo-down tune-demo test lint syntax image sglang-image pytest pytest-with-image molecule

help:
	@echo "make demo   - set up, then run the rollout on the simulated node (test double of SGLang)"
	@echo "make test   - set up, then run every check: linters, syntax, pytest, molecule scenarios"
	@echo "make demo-oom  - the failure path: a topology that does not fit, refused, then diagnosed"
	@echo "make demo-down - stop what the demo left running"
	@echo "make tune-demo - a small tuning sweep on the simulated node (table, plot, JSON, winner; SIMULATED)"
	@echo "make image  - build the real sm_120 SGLang image (skipped when its input tag exists)"

setup:
	@$(STAGE) setup bash tools/setup/bootstrap.sh

demo: setup
	@$(STAGE) "demo: site.yml on the simulated node" ansible-playbook -i inventory/sim site.yml
	@$(STAGE) "demo: a switch, then an automatic rollback" bash tools/demo/switch.sh
	@bash tools/demo/summary.sh tp4x2

demo-oom: setup
	@$(STAGE) "demo-oom: a topology that does not fit" bash tools/demo/oom.sh

demo-down:
	@bash tools/demo/down.sh

tune-demo: setup
	@$(STAGE) "tune-demo: a sweep of 5 candidates on the simulated node" bash tools/demo/tune.sh

lint:
	@$(STAGE) "lint: yamllint" yamllint -s .
	@$(STAGE) "lint: ansible-lint" ansible-lint --offline
	@$(STAGE) "lint: ruff" bash -c 'ruff check . && ruff format --check .'
	@$(STAGE) "lint: hadolint" bash -c 'find images molecule -name Dockerfile -print0 | xargs -0 hadolint'

syntax:
	@$(STAGE) "syntax: site.yml" ansible-playbook -i inventory/sim --syntax-check site.yml
	@$(STAGE) "syntax: site.yml (node inventory)" ansible-playbook -i inventory/node --syntax-check site.yml
	@$(STAGE) "syntax: playbooks/*.yml (node inventory)" ansible-playbook -i inventory/node --syntax-check playbooks/*.yml

# The real sm_120 SGLang image, tagged by its inputs (a second run with the same inputs builds nothing).
# make test builds it while the tests that do not need it run; its own tests (marker sglang_image) read .cache/sglang-image.tag.
image: setup sglang-image

sglang-image:
	@$(STAGE) "image: sglang-sm120" bash tools/setup/sglang-image.sh

pytest:
	@SGLNODE_FORBID_SKIPS=1 $(STAGE) pytest pytest -p no:cacheprovider

# make test: the image builds while the tests that do not need it run (tools/setup/test-pytest.sh).
pytest-with-image:
	@bash tools/setup/test-pytest.sh

molecule:
	@$(STAGE) molecule bash tools/setup/molecule-all.sh

test: setup
	@start=$$(date +%s); rc=0; \
	$(MAKE) --no-print-directory -k lint syntax pytest-with-image molecule || rc=$$?; \
	if [ $$rc -eq 0 ]; then verdict=ok; else verdict="FAILED (rc $$rc)"; fi; \
	echo "[timing] make test total: $$(( $$(date +%s) - start ))s $$verdict"; \
	exit $$rc
