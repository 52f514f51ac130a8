# amiss: the two commands a newcomer types are `make run` and `make test`. `make help` lists the rest.
GO        ?= go
CONFIG    ?= examples/amiss.yaml
# The example's root; any other configuration gets one of its own, named after it
# (examples/github.yaml: var/github), since a root keeps the limits it was made with.
ROOT      ?= $(if $(filter examples/amiss.yaml,$(CONFIG)),var/ledger,var/$(basename $(notdir $(CONFIG))))
# The configuration sam build packages beside each function (see docs/deployment.md).
DEPLOY_CONFIG ?= examples/aws.yaml
LISTEN    ?= 127.0.0.1:8080
# make run makes its own roots the first time (amiss serve -create); a ROOT you name must exist,
# so that a mistyped one is refused rather than served empty: CREATE=yes makes a new one.
CREATE    ?= $(if $(filter file,$(origin ROOT)),yes)
# The example configuration's demo route reads its secret from here. This value is the
# Standard Webhooks specification's test key: fine on 127.0.0.1, never for a deployment.
export AMISS_DEMO_SECRET ?= whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
FUZZTIME  ?= 30s
BENCHTIME ?= 1x
PKGS      := ./...
# Which build: stamped into bin/amiss and every Lambda bootstrap (amiss version, and each
# function's "starting" log line; see internal/buildinfo).
VERSION   := $(shell git describe --always --dirty 2>/dev/null)
COMMIT    := $(shell git rev-parse HEAD 2>/dev/null)
STAMP     := -X github.com/amiss-ci/amiss/internal/buildinfo.version=$(VERSION) -X github.com/amiss-ci/amiss/internal/buildinfo.commit=$(COMMIT)

# MinIO for the S3 ledger's tests: a pinned release built from its Go module, in a local image.
MINIO_VERSION ?= v0.0.0-20260212201848-7aac2a2c5b7c
MINIO_IMAGE   ?= amiss-minio:local
MINIO_BUILD   := .cache/minio

.DEFAULT_GOAL := help
.PHONY: help run sign demo check test test-prepare build bench fuzz soak powercut attack-ext4 vet clean minio-image rie \
	invoke-ingress invoke-runner invoke-cleanup invoke-fakes invoke-clean \
	build-IngressFunction build-RunnerFunction build-CleanupFunction build-OperatorFunction lint-template

## help: this list
help:
	@echo "amiss: make TARGET [VAR=value]   (start with make run, then make sign in a second terminal)"
	@echo
	@sed -n 's/^## \([a-z0-9-]*\): /  \1\t/p' $(MAKEFILE_LIST) | expand -t 18
	@echo "  build-NAME      what sam build runs for each function (IngressFunction, RunnerFunction, CleanupFunction, OperatorFunction)"
	@echo
	@echo "Variables, with their values here:"
	@echo "  CONFIG=$(CONFIG) ROOT=$(ROOT) LISTEN=$(LISTEN)   (run, sign, demo, check)  CREATE=$(CREATE) (run: make ROOT if missing)"
	@echo "  TITLE=\"...\" (sign: a pull request)  EVENT=FILE (invoke-*)  INVOKE_STATE=$(INVOKE_STATE)"
	@echo "  DEPLOY_CONFIG=$(DEPLOY_CONFIG) (sam build)  FUZZTIME=$(FUZZTIME)  BENCHTIME=$(BENCHTIME)  POWER_SCALE=$(POWER_SCALE)"
	@echo "  MINIO_IMAGE=$(MINIO_IMAGE)  GO=$(GO)"
	@echo "Another address when $(LISTEN) is taken: make run LISTEN=127.0.0.1:18080, then make sign LISTEN=127.0.0.1:18080"

## run: build amiss and serve the example configuration on LISTEN (127.0.0.1:8080) over the file root ROOT (var/ledger)
run: build
	@echo "== serving $(CONFIG) on http://$(LISTEN) over $(ROOT): make sign$(if $(filter-out 127.0.0.1:8080,$(LISTEN)), LISTEN=$(LISTEN)) in another terminal; Ctrl-C stops"
	./bin/amiss serve -config $(CONFIG) -root $(ROOT) -listen $(LISTEN)$(if $(filter yes,$(CREATE)), -create)

## sign: send a signed sample webhook to the server make run started, at LISTEN (TITLE="..." for a pull request)
sign: build
	@./bin/amiss sign -send -config $(CONFIG) -url http://$(LISTEN) $(if $(TITLE),-title "$(TITLE)")

## demo: take one delivery through every state of the ledger root make run uses, without a server
demo: build
	./bin/amiss demo -config $(CONFIG) -root $(ROOT)

## check: read every secret of CONFIG, probe the ledger ROOT and the publishers (posts nothing)
check: build
	./bin/amiss check -config $(CONFIG) -root $(ROOT)

# TEST_TIMEOUT guards against a hung test; it is no speed target. The crash and fault sweeps
# (localfs, objstore) take 4-8 minutes alone on two cores, and three times that while another
# make test runs on the same machine.
TEST_TIMEOUT ?= 60m

## test: vet, gofmt, then every test with the race detector; prepares MinIO and the emulator when it can; ends with a summary
test: vet test-prepare
	@mkdir -p .cache
	@echo "== go test -race ./... (the whole output goes to .cache/test.log)"
	@{ $(GO) test -race -count=1 -json -timeout $(TEST_TIMEOUT) $(PKGS) 2>&1; echo "$$?" > .cache/test.rc; } \
		| $(GO) run ./internal/testsummary -log .cache/test.log && [ "$$(cat .cache/test.rc)" = 0 ]

# The S3 ledger's tests need MinIO in Docker, the Lambda tests the runtime interface emulator:
# build and install them when this machine can, and say so loudly when it cannot (those tests
# then skip, and the summary lists them with the reason).
test: export TESTCONTAINERS_RYUK_DISABLED ?= true
test: export TESTCONTAINERS_HOST_OVERRIDE ?= 127.0.0.1
test: export AMISS_MINIO_IMAGE ?= $(MINIO_IMAGE)
# test-prepare: build the MinIO image and install the emulator when this machine can (make test runs it)
test-prepare:
	@if docker info >/dev/null 2>&1; then \
		docker image inspect $(MINIO_IMAGE) >/dev/null 2>&1 || { \
			echo "== building the MinIO image $(MINIO_IMAGE) from the pinned release (once; about three minutes)"; \
			$(MAKE) --no-print-directory minio-image; } \
		|| echo "*** could not build $(MINIO_IMAGE): the S3 ledger's tests will be SKIPPED"; \
	else \
		echo "*** Docker is not running here: the S3 ledger's tests will be SKIPPED (start dockerd, then make test)"; \
	fi
	@$(MAKE) --no-print-directory rie >/dev/null || echo "*** could not install the runtime interface emulator (make rie): the Lambda tests will be SKIPPED"

## vet: go vet (the product and the bench module, which builds against it) and the gofmt check (make test runs them first)
vet:
	$(GO) vet $(PKGS)
	cd bench && $(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

## build: the amiss binary in bin/
build:
	@test -x bin/amiss || echo "== first build of bin/amiss: Go fetches the modules, then compiles amiss and its dependencies (the AWS SDK among them) and prints nothing for a few minutes; later builds take seconds"
	$(GO) build -ldflags "$(STAMP)" -o bin/amiss ./cmd/amiss

## bench: the measurements recorded in docs/benchmarks.md (the S3 ones need MinIO: see docs/s3-ledger.md)
bench:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 60m ./localfs/ ./objstore/ | tee bench.out

FUZZ_PKGS := ./localfs/ ./functions/webhook/ ./functions/ingress/

## fuzz: every fuzz target (decoders, signature headers, the ingress handler) for FUZZTIME each
fuzz:
	@for p in $(FUZZ_PKGS); do \
		for t in $$($(GO) test -list '^Fuzz' $$p | grep '^Fuzz'); do \
			echo "== $$p $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$p || exit 1; \
		done; \
	done

## soak: the multi-process tests and the history checks of both backends at a larger scale
soak: test-prepare
	AMISS_SOAK=1 AMISS_MINIO_IMAGE=$(MINIO_IMAGE) TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 \
		$(GO) test -run 'TestMultiProcess|TestHistories' -count=1 -timeout 90m -v ./localfs/ ./objstore/ \
		| grep -E '^(---|ok|FAIL|PASS)|history check|killed|workers'

## powercut: the FileLedger's power-loss tests at a larger scale (every call cut, more recoveries and histories)
POWER_SCALE ?= 10
powercut:
	AMISS_POWER_SCALE=$(POWER_SCALE) $(GO) test -run 'TestPowerCut' -count=1 -timeout 90m -v ./localfs/ \
		| grep -E '^(---|ok|FAIL|PASS)|power cuts|histories'

## attack-ext4: as root, fail an ext4 journal commit under the FileLedger on a loop device (no answered admission may be lost)
attack-ext4:
	bash scripts/ext4-journal-abort.sh

# SAM's makefile build method: each function's CodeUri is its own main package
# (functions/cmd/<name>), which is all sam build copies; the template's ContextPath and
# WorkingDirectory make it run build-<LogicalId> of this Makefile at the repository's root,
# with ARTIFACTS_DIR set (SAM CLI 1.63 or later). Each function is a bootstrap for
# provided.al2023 (arm64; LAMBDA_ARCH for a local run), with the packaged configuration beside
# it. The check refuses a configuration that reads a variable the template does not declare
# (Lambda would not set it).
LAMBDA_ARCH  ?= arm64
LAMBDA_BUILD = CGO_ENABLED=0 GOOS=linux GOARCH=$(LAMBDA_ARCH) $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w $(STAMP)'
PACKAGE_CHECK = $(GO) run ./cmd/amiss check -template template.yaml -config $(DEPLOY_CONFIG) -function
AT_ROOT = @test -f go.mod -a -d functions/cmd || { echo "$@ runs at the repository's root: a SAM CLI older than 1.63 ignores the template's WorkingDirectory (upgrade it)" >&2; exit 1; }

build-IngressFunction:
	$(AT_ROOT)
	$(PACKAGE_CHECK) IngressFunction >/dev/null || $(PACKAGE_CHECK) IngressFunction
	$(LAMBDA_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/cmd/ingress
	cp $(DEPLOY_CONFIG) $(ARTIFACTS_DIR)/amiss.yaml

build-RunnerFunction:
	$(AT_ROOT)
	$(PACKAGE_CHECK) RunnerFunction >/dev/null || $(PACKAGE_CHECK) RunnerFunction
	$(LAMBDA_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/cmd/runner
	cp $(DEPLOY_CONFIG) $(ARTIFACTS_DIR)/amiss.yaml

build-CleanupFunction:
	$(AT_ROOT)
	$(PACKAGE_CHECK) CleanupFunction >/dev/null || $(PACKAGE_CHECK) CleanupFunction
	$(LAMBDA_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/cmd/cleanup
	cp $(DEPLOY_CONFIG) $(ARTIFACTS_DIR)/amiss.yaml

# The operator function reads no configuration: the ledger's root records what it needs.
build-OperatorFunction:
	$(AT_ROOT)
	$(LAMBDA_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/cmd/operator

## lint-template: cfn-lint every documented variant of template.yaml (S3, EFS with each network, ...; needs cfn-lint)
lint-template:
	sh scripts/lint-template.sh

# The local Lambda loop: each function built as sam build builds it (for this machine's
# architecture), run under the pinned runtime interface emulator with the variables of
# events/env.json (only those the template declares, as SAM does), over a file ledger in
# INVOKE_STATE, with a stand-in SQS queue and Secrets Manager on loopback.
INVOKE_STATE ?= var/invoke
INVOKE_BUILD := .cache/invoke
INVOKE_FLAGS ?=
HOST_ARCH    := $(shell $(GO) env GOARCH)
INVOKE = $(GO) run ./internal/invoke -template template.yaml -env events/env.json -secrets events/secrets.json \
	-state $(INVOKE_STATE) -rie .cache/rie/bin/aws-lambda-rie -set AMISS_LEDGER=file:$(abspath $(INVOKE_STATE))/ledger $(INVOKE_FLAGS)

invoke-build-%:
	@$(MAKE) --no-print-directory build-$* ARTIFACTS_DIR=$(abspath $(INVOKE_BUILD)/$*) LAMBDA_ARCH=$(HOST_ARCH)

## invoke-ingress: the ingress under the emulator with events/ingress-webhook.json (EVENT=file for another)
invoke-ingress: rie invoke-build-IngressFunction
	$(INVOKE) -function IngressFunction -bootstrap $(INVOKE_BUILD)/IngressFunction/bootstrap -event $(or $(EVENT),events/ingress-webhook.json)

## invoke-runner: the runner under the emulator, fed the message the ingress queued for the key it answered
invoke-runner: rie invoke-build-RunnerFunction
	$(INVOKE) -function RunnerFunction -bootstrap $(INVOKE_BUILD)/RunnerFunction/bootstrap -event $(or $(EVENT),queued)

## invoke-cleanup: the cleanup under the emulator with events/cleanup-schedule.json
invoke-cleanup: rie invoke-build-CleanupFunction
	$(INVOKE) -function CleanupFunction -bootstrap $(INVOKE_BUILD)/CleanupFunction/bootstrap -event $(or $(EVENT),events/cleanup-schedule.json)

## invoke-fakes: serve the stand-in SQS and Secrets Manager at events/env.json's addresses (for sam local invoke)
invoke-fakes:
	$(INVOKE) -fakes

## invoke-clean: forget the local Lambda loop's ledger and queue
invoke-clean:
	rm -rf $(INVOKE_STATE)

## minio-image: build the pinned MinIO release from source into the image MINIO_IMAGE (Docker)
minio-image:
	mkdir -p $(MINIO_BUILD)/context/tmp
	test -x $(MINIO_BUILD)/bin/minio || CGO_ENABLED=0 GOBIN=$(abspath $(MINIO_BUILD))/bin $(GO) install github.com/minio/minio@$(MINIO_VERSION)
	cp $(MINIO_BUILD)/bin/minio integration/minio/Dockerfile $(MINIO_BUILD)/context/
	docker build -q -t $(MINIO_IMAGE) $(MINIO_BUILD)/context

# The runtime interface emulator for the Lambda bootstraps' tests (integration/).
RIE_VERSION ?= v0.0.0-20261030222936-bef5c4ba774d

## rie: install the pinned runtime interface emulator into .cache/rie/bin
rie:
	@test -x .cache/rie/bin/aws-lambda-rie || GOBIN=$(abspath .cache/rie/bin) $(GO) install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$(RIE_VERSION)

## clean: remove bin/, var/ (every local ledger root: make run's and the invoke loop's), bench.out and .cache/
clean:
	rm -rf bin var bench.out .cache
