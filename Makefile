# trainguard — see README.md. Every tool the tests need is installed by a
# target here into bin/, so a fresh clone needs nothing by hand.
SHELL := /bin/bash
.DEFAULT_GOAL := build

BIN        := $(CURDIR)/bin
K8S_BIN    := $(BIN)/k8s
GO         ?= go
# The release: written once, in internal/foundations/version/appversion.go (the chart,
# the image tag and the SDK carry copies test/install keeps equal;
# hack/set-version.sh changes them all). COMMIT is the source revision.
VERSION    := $(shell sed -n 's/^const AppVersion = "\(.*\)"$$/\1/p' internal/foundations/version/appversion.go)
COMMIT     ?= $(shell c=$$(git rev-parse --short=12 HEAD 2>/dev/null) && { git diff --quiet HEAD 2>/dev/null && echo $$c || echo $$c-dirty; })
LDFLAGS    := -s -w -X github.com/trainguard/trainguard/internal/foundations/version.Version=$(VERSION) -X github.com/trainguard/trainguard/internal/agent.Version=$(VERSION) -X github.com/trainguard/trainguard/internal/foundations/version.Commit=$(COMMIT)
HELM_VERSION ?= v3.19.0
HELM       := $(BIN)/helm
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT := $(BIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
PYTHON     := /usr/bin/python3

.PHONY: build
build: ## Build bin/trainguard and bin/trainguard-agent.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/trainguard ./cmd/trainguard
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w' -o $(BIN)/trainguard-agent ./cmd/trainguard-agent

.PHONY: k8s-bins
k8s-bins: ## Build etcd and kube-apiserver v1.37.2 from Go modules into bin/k8s/<version> (cached).
	bash hack/build-k8s.sh all

.PHONY: k8s-bins-previous
k8s-bins-previous: ## Build kube-apiserver v1.36.3 (KUBE_PREVIOUS) too, for make test-kube-previous (cached).
	KUBE_VERSIONS=$(KUBE_PREVIOUS) bash hack/build-k8s.sh all

.PHONY: tools
tools: $(HELM) k8s-bins trainer-bins python-deps kwok ## Install every tool the tests need.

.PHONY: trainer-bins
trainer-bins: ## Build the Kubeflow Trainer and JobSet controllers v2.3.0 + v0.12.0 into bin/trainer (cached).
	bash hack/build-trainer.sh latest

.PHONY: trainer-bins-previous
trainer-bins-previous: ## Build the older Trainer and JobSet pair, v2.0.0 + v0.8.2, for make test-kube-previous (cached).
	bash hack/build-trainer.sh v2.0

.PHONY: helm
helm: $(HELM) ## Install helm into bin/ (cached).

# The release binaries stamp the Kubernetes minor of their client-go (1.34
# for Helm v3.19) as the version `helm template` renders for; a plain
# `go install` would render for v1.20, which the chart's kubeVersion refuses.
HELM_K8S_MINOR ?= 34
$(HELM):
	GOBIN=$(BIN) $(GO) install -ldflags '-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(HELM_K8S_MINOR) -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(HELM_K8S_MINOR)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: promtool
promtool: ## Install promtool from Debian's prometheus package into bin/ (cached), for the alert rule tests.
	bash hack/install-promtool.sh

# The alert rules are checked and unit-tested with promtool (test/observability).
test: promtool

.PHONY: python-deps
python-deps: ## Debian's python3-torch for the checkpoint end-to-end tests.
	bash hack/install-python-deps.sh

.PHONY: test
# test/checkpoint runs real PyTorch processes (in-process recovery, sharded
# state): on 2 busy cores it took up to 10 minutes, go test's default limit.
test: tools build ## Unit, golden, fuzz-seed, chart, checkpoint, Python and integration tests (what CI runs; make test-kube-previous adds the older releases).
	$(GO) test -count=1 -timeout 20m $$($(GO) list ./... | grep -v -e '/test/integration$$' -e '/test/rescheduler$$' -e '/test/trainer$$')
	$(MAKE) test-integration
	$(MAKE) test-trainer
	$(MAKE) test-python

# The edit-test loop: every package outside test/ (unit, golden, fuzz seeds,
# the webhook over HTTP); no API server, no PyTorch, no tool in bin/.
.PHONY: unit
unit: ## Unit and golden tests only: no API server, no PyTorch, nothing in bin/ (about a minute warm).
	$(GO) test -count=1 $$($(GO) list ./... | grep -v '/test/')

.PHONY: test-integration
test-integration: ## Integration and rescheduler suites against a real kube-apiserver; prints wall time and figures.
	set -o pipefail; $(GO) test -count=1 -v ./test/integration/ ./test/rescheduler/ \
		| grep -E '^(--- |ok|FAIL|panic|integration suite)|_test.go:[0-9]+: |median'

# The Trainer releases the TrainJob suite runs: the newest pair in make test,
# both in make test-kube-previous.
TRAINER_VERSIONS ?= v2.3.0

.PHONY: test-trainer
test-trainer: ## TrainJob suite: real kube-apiserver and trainguard with the real Trainer + JobSet controllers of each of TRAINER_VERSIONS (default v2.3.0 + v0.12.0).
	set -o pipefail; for v in $(TRAINER_VERSIONS); do \
		TRAINER_VERSION=$$v $(GO) test -count=1 -v ./test/trainer/ | grep -E '^(--- |ok|FAIL|panic|trainer suite)|_test.go:[0-9]+: ' || exit 1; \
	done

# The older releases users still run (README "Versions tested"): the
# version-dependent suites (the chart's objects applied for real, the TrainJob
# suite) on the previous kube-apiserver, and the older Trainer pair on both.
# Out of make test: on a cold machine the second Kubernetes tree and Trainer
# pair cost about 20 CPU-minutes to compile, a third of CI's budget.
KUBE_PREVIOUS ?= v1.36.3

.PHONY: test-kube-previous
test-kube-previous: k8s-bins-previous trainer-bins trainer-bins-previous ## The older releases: chartapply and the TrainJob suite (both Trainer pairs) on kube-apiserver v1.36.3 (KUBE_PREVIOUS), Trainer v2.0.0 + JobSet v0.8.2 on the newest.
	KUBE_VERSION=$(KUBE_PREVIOUS) $(GO) test -count=1 ./test/chartapply/
	$(MAKE) test-trainer TRAINER_VERSIONS=v2.0.0
	KUBE_VERSION=$(KUBE_PREVIOUS) $(MAKE) test-trainer TRAINER_VERSIONS='v2.3.0 v2.0.0'

.PHONY: test-python
test-python: ## The Python SDK's unittest suite (with the python3 in PYTHON, torch if installed).
	cd sdk/python && $(PYTHON) -m unittest discover -s tests -v

.PHONY: golden
golden: ## Regenerate every golden file: webhook/testdata/*.out.yaml (checked offline and over HTTP) and docs/validation-rules.md.
	$(GO) test ./webhook/ -run '^TestGolden$$' -count=1 -update
	$(GO) test ./validators/ -run Golden -count=1 -update
	$(GO) test ./webhook/ ./validators/ -run Golden -count=1

.PHONY: bench
bench: ## Handler benchmarks (figures in README).
	$(GO) test ./webhook/ -run '^$$' -bench . -benchmem

.PHONY: bench-checkpoint
bench-checkpoint: python-deps ## Periodic checkpoints: training throughput with none, background and synchronous saves, side by side (figures in docs/checkpoint-protocol.md).
	$(PYTHON) examples/trainer/bench_periodic.py

.PHONY: bench-rescheduler-rss
bench-rescheduler-rss: k8s-bins $(HELM) ## Rescheduler manager RSS: 10,000 managed pods on 1,000 nodes, 1,000 records, vs the old cache (several minutes; figure in docs/rescheduler.md).
	set -o pipefail; $(GO) test -count=1 -tags rssbench -run '^TestManagerRSS$$' -v -timeout 30m ./test/rescheduler/ \
		| grep -E '^(--- |ok|FAIL|panic)|rss_test.go:[0-9]+: '

.PHONY: load
load: k8s-bins $(HELM) ## Admission cost through a real kube-apiserver: no webhook, a no-op, a patching no-op, trainguard (LOAD_N, LOAD_CLIENTS, LOAD_ROUNDS, LOAD_PROFILE_DIR, LOAD_CHART_VALUES).
	$(GO) test ./test/load/ -run '^$$' -bench . -benchtime 1x -timeout 30m

# KWOK's controller simulates nodes (their Leases) and pods for make scale
# and its 200-node smoke run in make test; the version is in the file name
# (test/scale.KWOKVersion reads the same one).
KWOK_VERSION ?= v0.8.0
KWOK := $(BIN)/kwok-$(KWOK_VERSION)

.PHONY: kwok
kwok: $(KWOK) ## Build the KWOK controller from Go modules into bin/ (cached).

$(KWOK):
	mkdir -p $(BIN)/.kwok-$(KWOK_VERSION)
	GOBIN=$(BIN)/.kwok-$(KWOK_VERSION) $(GO) install sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION)
	mv $(BIN)/.kwok-$(KWOK_VERSION)/kwok $@
	rmdir $(BIN)/.kwok-$(KWOK_VERSION)

# make scale's flags (SCALE_ARGS), e.g. SCALE_ARGS='-nodes 5000 -lease-seconds 160'
# (longer Leases keep KWOK's renewals within a small machine's API server).
SCALE_ARGS ?= -nodes 1000

.PHONY: scale
scale: build k8s-bins $(HELM) $(KWOK) ## Simulated cluster (KWOK): steady state, admission bursts, churn, zone outage, control-plane stall; figures per scenario (SCALE_ARGS, default -nodes 1000; docs/scale.md).
	$(GO) run ./hack/scale $(SCALE_ARGS)

# SCALE_REPORTS: the report.json of each size's make scale run.
SCALE_REPORTS ?=

.PHONY: scale-plot
scale-plot: ## Fit make scale's figures against size and plot them (docs/scale.png) from SCALE_REPORTS (report.json files); installs Debian's python3-matplotlib, a benchmark-only dependency.
	$(PYTHON) -c 'import matplotlib' 2>/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-matplotlib >/dev/null; }
	$(PYTHON) hack/scale/plot.py docs/scale.png $(SCALE_REPORTS)

.PHONY: fuzz
fuzz: ## Run each fuzz target for 60s.
	bash hack/fuzz.sh 60s

.PHONY: lint
lint: $(GOLANGCI_LINT) python-lint-tool ## go vet, gofmt check, golangci-lint (.golangci.yml) and pyflakes on every Python file.
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GOLANGCI_LINT) run ./...
	PYTHONPATH=$(BIN)/pyflakes $(PYTHON) -m pyflakes $$(git ls-files --cached --others --exclude-standard '*.py')

.PHONY: python-lint-tool
python-lint-tool: ## Install pyflakes from Debian's python3-pyflakes into bin/pyflakes (cached), for make lint.
	bash hack/install-pyflakes.sh

.PHONY: lint-tool
lint-tool: $(GOLANGCI_LINT) ## Install golangci-lint into bin/ (cached; .ci/run builds it beside the other tools).

# The version is in the file name, so changing GOLANGCI_LINT_VERSION installs it.
$(GOLANGCI_LINT):
	mkdir -p $(BIN)/.golangci-lint-$(GOLANGCI_LINT_VERSION)
	GOBIN=$(BIN)/.golangci-lint-$(GOLANGCI_LINT_VERSION) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(BIN)/.golangci-lint-$(GOLANGCI_LINT_VERSION)/golangci-lint $@
	rmdir $(BIN)/.golangci-lint-$(GOLANGCI_LINT_VERSION)

.PHONY: run
run: build ## Run trainguard against your current kubeconfig, with self-signed dev certs in ./tmp/certs.
	$(BIN)/trainguard serve --dev-certs --cert-dir $(CURDIR)/tmp/certs --config examples/config.yaml \
		--metrics-bind-address 127.0.0.1:8080 --health-probe-bind-address 127.0.0.1:8081 --zap-log-level=debug

.PHONY: demo
demo: build k8s-bins $(HELM) ## Local control plane with trainguard wired in, running the sample jobs (first run ~25 min cold: it compiles kube-apiserver, etcd and helm).
	bash hack/demo.sh

.PHONY: help
help:
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-22s %s\n", $$1, $$2}'

# The chart's default image, so a loaded archive needs no --set at install.
IMAGE         ?= ghcr.io/trainguard/trainguard:$(VERSION)
IMAGE_ARCHIVE ?= $(BIN)/image/trainguard-$(VERSION).tar
IMAGE_ARCH    ?= $(shell $(GO) env GOARCH)

.PHONY: chart-lint
chart-lint: $(HELM) ## helm lint --strict the chart for each supported mode.
	$(HELM) lint --strict charts/trainguard
	$(HELM) lint --strict charts/trainguard --set certManager.enabled=false
	$(HELM) lint --strict charts/trainguard --set clusterWide=true
	$(HELM) lint --strict charts/trainguard --set certManager.issuerRef.name=my-issuer,certManager.issuerRef.kind=ClusterIssuer

.PHONY: image
image: ## Write the image as an archive (IMAGE_ARCHIVE) for docker load, ctr import or kind load; no container engine needed.
	IMAGE='$(IMAGE)' IMAGE_ARCHIVE='$(IMAGE_ARCHIVE)' IMAGE_ARCH='$(IMAGE_ARCH)' VERSION='$(VERSION)' COMMIT='$(COMMIT)' bash hack/image.sh

.PHONY: image-check
image-check: image ## Import IMAGE_ARCHIVE into a private containerd with ctr (root; namespace tg-test) and run its /trainguard version.
	bash hack/image-import-check.sh '$(IMAGE_ARCHIVE)' '$(IMAGE)' '$(VERSION)'

.PHONY: docker-image
docker-image: ## The same image with `docker build` (needs a Docker engine with BuildKit).
	docker build --build-arg COMMIT=$(COMMIT) -t $(IMAGE) .

.PHONY: version
version: ## Print the release (internal/foundations/version/appversion.go), which the binary, chart, image and SDK share.
	@echo $(VERSION)

# ---- Real multi-node cluster on this machine (docs/e2e.md) -------------------
E2E_TIMEOUT ?= 40m
E2E_RUN     ?= TestE2E

.PHONY: cluster
cluster: build k8s-bins $(HELM) ## Real local cluster: control plane, 10 nodes (kubelet + containerd; NODES), CNI, DNS, cert-manager, training-operator, JobSet, Trainer, Kueue.
	bash hack/cluster/up.sh

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and remove everything it made (processes, mounts, cgroups, links, iptables).
	bash hack/cluster/down.sh

.PHONY: cluster-clean
cluster-clean: cluster-down ## cluster-down plus the nodes' cached image stores.
	rm -rf bin/cluster/cache

.PHONY: e2e-images
e2e-images: build ## Build every image the local cluster runs (tarballs in bin/cluster/images).
	bash hack/cluster/build-bins.sh all
	bash hack/cluster/images.sh

# ---- Goodput benchmark (docs/goodput.md) -------------------------------------
SEED     ?= 1
DURATION ?= 30m
INTERVAL ?= 3m
GOODPUT_KUBECONFIG ?= /tmp/trainguard-cluster/kubeconfig
GOODPUT_HOOK       ?= hack/cluster/goodput-hook.sh
GOODPUT_ARGS       ?= -kubectl bin/cluster/kubectl -pull-policy Never

.PHONY: goodput
goodput: ## ETTR of trainguard, plain Kubernetes and Kueue's recovery under a seeded chaos schedule (SEED, DURATION, INTERVAL) on a cluster with trainguard installed; table + docs/goodput.png.
	@/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || apt-get install -y python3-matplotlib >/dev/null
	KUBECONFIG=$(GOODPUT_KUBECONFIG) $(GO) run ./hack/goodput -seed $(SEED) -duration $(DURATION) -interval $(INTERVAL) -hook $(GOODPUT_HOOK) -out bin/goodput $(GOODPUT_ARGS)
	/usr/bin/python3 hack/goodput/plot.py bin/goodput docs/goodput.png "ETTR under a chaos schedule: seed $(SEED), one disruption per $(INTERVAL) (bin/goodput/table.md)"

.PHONY: e2e
# A cluster that does not start is explained (hack/cluster/addons.sh), torn
# down and started once more before the scenarios: its start-up is not what
# they test, and one unlucky start should not cost a whole CI run. A second
# failure tears down what was started (unless E2E_KEEP), so no half-started
# node keeps running.
e2e: build k8s-bins $(HELM) ## Scenarios on the local cluster, in four lanes side by side (drain, Indexed Job drain, TrainJob drain, Kueue preemption, checkpoint-aware preemption, scheduler preemption, exit codes, rank crash, trainguard down, upgrade, TrainJob node crash, partition, goodput short form (E2E_GOODPUT=0 skips it), node crash); one table. E2E_KEEP=1 keeps the cluster.
	bash hack/cluster/up.sh || { echo "make e2e: the cluster did not start (why: above); starting it once more"; \
		bash hack/cluster/up.sh || { [ -n "$(E2E_KEEP)" ] || bash hack/cluster/down.sh; exit 1; }; }
	set -o pipefail; rc=0; KUBECONFIG=/tmp/trainguard-cluster/kubeconfig $(GO) test -tags e2e -count=1 -parallel 8 -timeout $(E2E_TIMEOUT) -run '$(E2E_RUN)' -v ./test/e2e/ \
		2>&1 | tee /tmp/trainguard-e2e.log | grep -E '^ *(--- |ok|FAIL|panic)|_test.go:[0-9]+: |^\||^e2e' || rc=$$?; \
	echo "full log: /tmp/trainguard-e2e.log"; \
	[ -n "$(E2E_KEEP)" ] || bash hack/cluster/down.sh; exit $$rc
