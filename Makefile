# junkyard.cluster — everything runs from here on a fresh Debian 12 machine
# (as root): `make test` installs what it needs, lints, and runs every test;
# `make lab` brings up the virtual cluster and runs site.yml against it.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)
export CONTAINERS_CONF := $(abspath molecule/containers.conf)
export ANSIBLE_CONFIG := $(abspath ansible.cfg)

# Debian packages the tests and the lab use.
APT_PACKAGES := python3-venv python3-dev gcc make git rsync shellcheck \
	podman runc debootstrap \
	qemu-system-x86 qemu-utils ipxe-qemu ovmf \
	openipmi ipmitool freeipmi-tools libopenipmi-dev \
	iproute2 bridge-utils stress-ng kmod binutils \
	prometheus prometheus-node-exporter chromium \
	$(shell sed 's/#.*//' lab/host-packages.txt)

# ansible-test sanity, the checks every collection on Galaxy is held to.  It
# must run from a directory named ansible_collections/<namespace>/<name>, so it
# runs on a copy of the working tree (tracked and new files, not ignored ones)
# under .cache, in a git repository of its own.  Offline: with --local, and a HOME of its own whose cache holds
# tests/sanity/pip_bootstrap.py in place of the pip bootstrap script ansible-test
# would download from a host CI cannot reach; the sanity virtual environments
# it then builds (pinned by ansible-test) come from PyPI and are kept in that
# HOME for the next run (SANITY_HOME=<dir> keeps them outside the checkout).
SANITY_PYTHON := 3.11
SANITY_ROOT := .cache/sanity/ansible_collections/junkyard/cluster
SANITY_HOME ?= .cache/ansible-test-home

.PHONY: help setup lint sanity test test-fast build-test-image lab lab-down collection clean

help:
	@echo "make test   - install what is needed, lint, run every test"
	@echo "make lab    - bring up the virtual cluster and run site.yml against it"
	@echo "make lint   - yamllint, ansible-lint (production), ruff, shellcheck, syntax checks, sanity"
	@echo "make sanity - ansible-test sanity (offline, on a copy under .cache/sanity)"

.cache/apt.stamp: Makefile
	@mkdir -p .cache
	@missing=$$(for p in $(APT_PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing Debian packages:" $$missing; \
	  apt-get update -qq; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@touch $@

$(VENV)/.stamp: requirements-dev.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	@touch $@

setup: .cache/apt.stamp $(VENV)/.stamp

lint: setup
	$(BIN)/yamllint --strict .
	$(BIN)/ansible-lint --offline -q
	$(BIN)/ruff check .
	shellcheck tools/* $$(git ls-files '*.sh')
	for inv in inventories/*/hosts.yml; do \
	  $(BIN)/ansible-playbook -i $$inv --syntax-check site.yml >/dev/null && echo "syntax-check site.yml: $$inv ok"; \
	done
	$(MAKE) --no-print-directory collection
	$(MAKE) --no-print-directory sanity

sanity: setup
	@rm -rf .cache/sanity && mkdir -p $(SANITY_ROOT) $(abspath $(SANITY_HOME))/.ansible/test/cache
	git ls-files -z --cached --others --exclude-standard \
	  | rsync -a --from0 --files-from=- --ignore-missing-args ./ $(SANITY_ROOT)/
	@# its own (empty) git repository: ansible-test lists the files through the
	@# nearest one, and this checkout's ignores .cache
	git -C $(SANITY_ROOT) init -q
	@pip=$$($(PY) -c "from types import SimpleNamespace as N; \
	  from ansible_test._internal.python_requirements import get_venv_packages as g; \
	  print(g(N(version='$(SANITY_PYTHON)'))['pip'])"); \
	cp tests/sanity/pip_bootstrap.py "$(abspath $(SANITY_HOME))/.ansible/test/cache/get_pip_$${pip//./_}.py"
	cd $(SANITY_ROOT) && HOME=$(abspath $(SANITY_HOME)) $(abspath $(BIN))/ansible-test sanity --local \
	  --python $(SANITY_PYTHON)

collection: setup
	@rm -rf .cache/collection && mkdir -p .cache/collection
	$(BIN)/ansible-galaxy collection build --force --output-path .cache/collection . >/dev/null
	$(BIN)/ansible-galaxy collection install --force -p .cache/collection/installed .cache/collection/junkyard-cluster-*.tar.gz >/dev/null
	@test -f .cache/collection/installed/ansible_collections/junkyard/cluster/plugins/modules/cluster_model.py
	@echo "collection: built and installed from the tarball"

build-test-image: setup
	tools/build-test-image

test: setup
	tools/run-tests

test-fast: setup
	$(BIN)/pytest tests -m "not molecule and not lab"

lab: setup
	lab/lab deploy

lab-down:
	lab/lab down

clean:
	rm -rf .cache/collection .cache/sanity .pytest_cache
