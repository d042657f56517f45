# coroner — `make test` runs everything CI runs; `make demo` shows one fence on a local control plane.
SHELL := /bin/bash
.DEFAULT_GOAL := test

CARGO ?= cargo
HARNESS_BIN := .cache/harness/bin
# Test threads get the stack coroner's own workers have (lib WORKER_STACK, 8 MiB): the fence loop's
# futures nest deeply, and an unoptimised build's frames outgrow the 2 MiB default of a test thread.
export RUST_MIN_STACK := 8388608

.PHONY: test lint unit install-check integration e2e peers harness cluster-up cluster-down demo crds build soak bench

## test: formatting, lints, unit tests, install paths, integration tests against emulated BMCs, end-to-end suite
test: lint unit install-check integration e2e

lint:
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets -- -D warnings

## unit: pure decisions, the simulator's fixed budget of seeds, and generated-file checks (no peers needed)
unit:
	$(CARGO) test --lib --test generated --test manifests --test floors

## soak: SEEDS more simulator seeds beyond the budget (default 10000), from seed FROM (default 1000)
SEEDS ?= 10000
FROM ?= 1000
soak:
	SIM_SEEDS=$(SEEDS) SIM_FROM=$(FROM) $(CARGO) test --lib sim_soak -- --ignored

## install-check: chart, bundle and config/ agree (RBAC, CRDs, Deployment); helm lint; values schema; OLM validators
install-check: harness
	$(CARGO) test --test install

## integration: the Redfish client and the fence state machine against sushy-tools and fence_redfish; the
## IPMI client against ipmi_sim and pyghmi, cross-checked with ipmitool and fence_ipmilan; the PDU outlet
## clients against an emulated Redfish PDU, snmpsim, snmpget and fence_apc_snmp, and the fence through a PDU
## level against them and a sushy BMC
integration: peers
	$(CARGO) test --test redfish
	$(CARGO) test --test ipmi
	$(CARGO) test --test pdu

## e2e: real control plane + NHC + emulated machines + the coroner binary; ONLY=storm_limits,cli_verify runs only those scenarios (names in tests/e2e/main.rs)
e2e: harness peers build
	CORONER_E2E_ONLY="$(ONLY)" tests/e2e/run.sh

build:
	$(CARGO) build

## peers: sushy-tools and pyghmi (PyPI) into .cache/peers; openipmi, ipmitool and fence-agents (Debian)
peers:
	tests/peers/install.sh

## harness: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, NHC, helm, node-agent, olm-validate
harness:
	tests/harness/build.sh
	tests/olm/build.sh

cluster-up: harness
	tests/harness/cluster.sh up

cluster-down:
	tests/harness/cluster.sh down

## demo: a local control plane, three emulated machines, NHC and coroner; one node dies
demo: harness peers build
	tests/e2e/demo.sh

## crds: regenerate crds/ from the API types, and the chart's and the bundle's copies
crds:
	$(CARGO) run -q -- crd > crds/coroner.yaml
	bundle/generate.sh

## bench: what one fence costs on the harness (release build; not part of `make test`): docs/benchmarks.md;
## ONLY=fences measures the ten single fences (P1, P4) and the baseline, without the storms
bench: harness peers
ifneq ($(ONLY),fences)
	$(CARGO) build --release --features mimalloc
	mkdir -p .cache/bench && cp target/release/coroner .cache/bench/coroner-mimalloc
endif
	$(CARGO) build --release
	CORONER_E2E=1 CORONER_BENCH_ONLY="$(ONLY)" CORONER_BIN=$(CURDIR)/target/release/coroner CORONER_BIN_MIMALLOC=$(CURDIR)/.cache/bench/coroner-mimalloc \
		$(CARGO) test -q --test e2e -- bench
