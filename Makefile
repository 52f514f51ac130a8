# amiss: the two commands a newcomer types are `make run` and `make test`.
GO        ?= go
ROOT      ?= var/ledger
CONFIG    ?= examples/amiss.yaml
LISTEN    ?= 127.0.0.1:8080
# The example configuration's demo route reads its secret from here. This value is the
# Standard Webhooks specification's test key: fine on 127.0.0.1, never for a deployment.
export AMISS_DEMO_SECRET ?= whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
FUZZTIME  ?= 30s
BENCHTIME ?= 1x
PKGS      := ./...

# MinIO for the S3 ledger's tests: a pinned release built from its Go module, in a local image.
MINIO_VERSION ?= v0.0.0-20260212201848-7aac2a2c5b7c
MINIO_IMAGE   ?= amiss-minio:local
MINIO_BUILD   := .cache/minio

.PHONY: run sign demo test build bench fuzz soak vet clean minio-image rie build-IngressFunction build-RunnerFunction build-CleanupFunction

## run: build amiss and serve the example configuration on 127.0.0.1:8080 over the file root var/ledger
run: build
	./bin/amiss serve -config $(CONFIG) -root $(ROOT) -listen $(LISTEN)

## sign: send a signed sample webhook to the server make run started (TITLE="..." for a pull request)
sign: build
	./bin/amiss sign -config $(CONFIG) -url http://$(LISTEN) $(if $(TITLE),-title "$(TITLE)") | sh
	@echo

## demo: take one delivery through every state of the ledger, without a server
demo: build
	./bin/amiss demo -root $(ROOT)

## test: vet, then every test with the race detector (verbose: figures such as "N crash points" are printed)
test: vet
	$(GO) test -race -count=1 -v -timeout 20m $(PKGS)

vet:
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

## build: the amiss binary in bin/
build:
	$(GO) build -o bin/amiss ./cmd/amiss

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

## soak: the multi-process test at a larger scale
soak:
	AMISS_SOAK=1 $(GO) test -run 'TestMultiProcess' -count=1 -timeout 60m -v ./localfs/

# SAM's makefile build method: sam build calls build-<LogicalId> with ARTIFACTS_DIR set. Each
# function is a bootstrap for provided.al2023 on arm64, with the configuration beside it.
LAMBDA_BUILD = CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w'

build-IngressFunction:
	$(LAMBDA_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/cmd/ingress
	cp $(CONFIG) $(ARTIFACTS_DIR)/amiss.yaml

build-RunnerFunction:
	$(LAMBDA_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/cmd/runner
	cp $(CONFIG) $(ARTIFACTS_DIR)/amiss.yaml

build-CleanupFunction:
	$(LAMBDA_BUILD) -o $(ARTIFACTS_DIR)/bootstrap ./functions/cmd/cleanup
	cp $(CONFIG) $(ARTIFACTS_DIR)/amiss.yaml

## minio-image: build the pinned MinIO release from source into the image $(MINIO_IMAGE)
minio-image:
	mkdir -p $(MINIO_BUILD)/context/tmp
	test -x $(MINIO_BUILD)/bin/minio || CGO_ENABLED=0 GOBIN=$(abspath $(MINIO_BUILD))/bin $(GO) install github.com/minio/minio@$(MINIO_VERSION)
	cp $(MINIO_BUILD)/bin/minio integration/minio/Dockerfile $(MINIO_BUILD)/context/
	docker build -q -t $(MINIO_IMAGE) $(MINIO_BUILD)/context

# The runtime interface emulator for the Lambda bootstraps' tests (integration/).
RIE_VERSION ?= v0.0.0-20261030222936-bef5c4ba774d

## rie: install the pinned runtime interface emulator into .cache/rie/bin
rie:
	test -x .cache/rie/bin/aws-lambda-rie || GOBIN=$(abspath .cache/rie/bin) $(GO) install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$(RIE_VERSION)

clean:
	rm -rf bin var bench.out .cache
