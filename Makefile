# kvfabric: `sudo make demo` and `sudo make test` install whatever is missing first.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
APT_PACKAGES := mininet openvswitch-switch iperf3 iputils-ping ethtool tcpdump tshark python3-venv \
	python3-cryptography openssh-server sudo chromium-headless-shell rt-tests
# The binary each Debian package provides, to decide idempotently what is missing.
APT_CHECKS := mn:mininet ovs-vsctl:openvswitch-switch iperf3:iperf3 ping:iputils-ping \
              ethtool:ethtool tcpdump:tcpdump tshark:tshark sshd:openssh-server sudo:sudo \
              chromium-headless-shell:chromium-headless-shell cyclictest:rt-tests
OVS_CTL := /usr/share/openvswitch/scripts/ovs-ctl
# The OVS daemons outlive make: start them with no inherited descriptor beyond
# 0-2, so they never hold a caller's lock or pipe open (e.g. `flock L make test`).
DETACHED := /usr/bin/python3 -c 'import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))'
# What root made in the checkout (.venv, results, caches) for a user who ran `sudo make`
# is theirs again afterwards, whether the command passed or failed.
HAND_BACK := if [ -n "$$SUDO_UID" ] && [ "$$SUDO_UID" != 0 ]; then \
  find . -xdev -path ./.git -prune -o -uid 0 -print0 | xargs -0 -r chown -h "$$SUDO_UID:$$SUDO_GID"; fi
AND_HAND_BACK := ; status=$$?; $(HAND_BACK); exit $$status

.PHONY: setup link demo test unit lint docs clean bench bench-quick references help

help:
	@echo "sudo make demo   install what is missing, then run the flagship experiment (topology-aware-placement)"
	@echo "sudo make test   install what is missing, then run every test (unit + root integration)"
	@echo "sudo make bench  every fidelity/cost benchmark in full (bench-quick: a few minutes)"
	@echo "sudo make references  rerun every bundled experiment into results/reference/"
	@echo "make unit        unit tests only (no root)"
	@echo "make lint        ruff"
	@echo "make docs        the documentation site (mkdocs build --strict into site/)"
	@echo "sudo make clean  remove leftovers of kvfabric runs (only those)"

setup: .setup-root apt ovs venv link

# sudo searches only root's PATH: put kvfabric on it (and everyone's) as a link to this
# checkout's .venv. Idempotent; replaces a link (another checkout's), never a file.
LINK := /usr/local/bin/kvfabric
link: .setup-root venv
	@if [ -e $(LINK) ] && [ ! -L $(LINK) ]; then \
	  echo "$(LINK) exists and is not a link: left as it is (use $(CURDIR)/$(VENV)/bin/kvfabric)"; \
	elif [ "$$(readlink $(LINK))" = "$(CURDIR)/$(VENV)/bin/kvfabric" ]; then echo "kvfabric: on PATH"; \
	else ln -sfn "$(CURDIR)/$(VENV)/bin/kvfabric" $(LINK) && echo "kvfabric: $(LINK) -> $(CURDIR)/$(VENV)/bin/kvfabric"; fi

.setup-root:
	@if [ "$$(id -u)" != 0 ]; then echo "make setup needs root: run 'sudo make $(MAKECMDGOALS)'"; exit 1; fi

apt: .setup-root
	@missing=""; \
	for pair in $(APT_CHECKS); do command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair##*:}"; done; \
	/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || missing="$$missing python3-venv"; \
	/usr/bin/python3 -c 'import cryptography' 2>/dev/null || missing="$$missing python3-cryptography"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(APT_PACKAGES) >/dev/null; \
	else echo "Debian packages: present"; fi

ovs: apt
	@if ovs-appctl -t ovs-vswitchd version >/dev/null 2>&1 && ovs-vsctl -t 2 show >/dev/null 2>&1; then \
	  echo "Open vSwitch: running"; \
	else echo "starting Open vSwitch"; $(DETACHED) $(OVS_CTL) start >/dev/null 2>&1 || $(DETACHED) $(OVS_CTL) start; fi

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@[ -x $(PY) ] || /usr/bin/python3 -m venv --system-site-packages $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]' 2>&1 | grep -v "^WARNING: Location" || true
	$(PY) -c "import mininet.net, os_ken, topologies, experiments" && touch $@
	@$(HAND_BACK)

demo: setup
	$(VENV)/bin/kvfabric demo $(AND_HAND_BACK)

test: setup
	$(PY) -m pytest -q tests $(AND_HAND_BACK)

bench: setup
	$(PY) -m benchmarks $(AND_HAND_BACK)

bench-quick: setup
	$(PY) -m benchmarks --quick $(AND_HAND_BACK)

references: setup
	$(VENV)/bin/kvfabric references $(AND_HAND_BACK)

unit: venv-user
	$(PY) -m pytest -q tests/unit

venv-user:
	@[ -x $(PY) ] || { echo "no $(VENV): run 'sudo make setup' once"; exit 1; }

lint: venv-user
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

docs: venv-user
	$(VENV)/bin/mkdocs build --strict --site-dir site

clean: .setup-root
	$(VENV)/bin/kvfabric clean
