# amiss: the two commands a newcomer types are `make run` and `make test`.
GO        ?= go
ROOT      ?= var/ledger
FUZZTIME  ?= 30s
BENCHTIME ?= 1x
PKGS      := ./...

.PHONY: run test build bench fuzz soak vet clean

## run: build amiss and take a sample delivery through every state on a local file root
run: build
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

## bench: the FileLedger measurements recorded in docs/benchmarks.md
bench:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -timeout 60m ./localfs/ | tee bench.out

## fuzz: every decoder's fuzz target for FUZZTIME each
fuzz:
	@for t in $$($(GO) test -list '^Fuzz' ./localfs/ | grep '^Fuzz'); do \
		echo "== $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./localfs/ || exit 1; \
	done

## soak: the multi-process test at a larger scale
soak:
	AMISS_SOAK=1 $(GO) test -run 'TestMultiProcess' -count=1 -timeout 60m -v ./localfs/

clean:
	rm -rf bin var bench.out
