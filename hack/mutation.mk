# Mutation testing of the pure decision packages (docs/reliability.md, "Mutation testing").
# Included by the Makefile, whose LOCALBIN it uses.
#
# gremlins changes one operator at a time in a package's code (a comparison's boundary or
# sense, an arithmetic operator, an increment) and runs the package's tests against each
# change: a change no test fails on is a guard no test holds. Each package has two floors, and
# the run fails when a score drops below its package's: efficacy (killed / (killed + lived))
# and mutant coverage (mutants the tests run / all mutants). gremlins counts as not covered a
# mutant that Go's coverage profile has no block for (a switch case's expression, an if's
# condition after a function literal on its line), whether or not a test runs it; that, not
# untested code, is what keeps internal/membership's coverage below 98%.

##@ Mutation testing

GREMLINS_VERSION := $(shell awk '$$1 == "require" && $$2 == "github.com/go-gremlins/gremlins" { print $$3 }' hack/tools/gremlins/go.mod)
GREMLINS ?= $(LOCALBIN)/gremlins-$(GREMLINS_VERSION)

# The packages and, for each, its floors in percent: efficacy, then mutant coverage. Only
# packages whose tests need no server: internal/agent's start etcd and an S3 server per
# test, once per mutant. The floors let one mutant more live, or one more go uncovered, fail the
# run (membership: 3 live of 270, 3 not covered of 273; backupplan: 2 live of 31), while a few
# killed mutants timing out on a loaded machine (which leaves them out of the count) do not.
MUTATION_PACKAGES ?= internal/membership internal/backupplan
MUTATION_FLOORS_internal/membership := 98.7 98.6
MUTATION_FLOORS_internal/backupplan := 92 99.9

$(GREMLINS): hack/tools/gremlins/go.mod
	$(call building,gremlins $(GREMLINS_VERSION) (the mutation tester),1.5 min)
	cd hack/tools/gremlins && go build -trimpath -o $@ github.com/go-gremlins/gremlins/cmd/gremlins

# $(call mutate_package,PACKAGE): one package's run, its floors from MUTATION_FLOORS_PACKAGE.
# The floors go in a configuration file: gremlins v0.6.0 reads --threshold-* flags as text and
# then ignores them (it passed a run far below them). A score must stay above its floor (a
# score equal to it fails). A mutant's tests may take 10 times the tests' own time before it
# counts as timed out (3 by default): on 2 shared cores the default turned most of backupplan's
# mutants into timeouts, which count neither as killed nor as lived. GOFLAGS=-count=1: the
# baseline run gremlins times must not come from Go's test cache (make test has just run the
# same tests), or every mutant, compiled afresh, times out against it. A mutant's time is
# mostly its compile and link, not its tests (internal/membership, measured 2026-11-26: about
# 2-3 s compiling the package with its tests, 2-3 s linking a 25 MB test binary, 0.5 s vet,
# under 1 s of tests, of which the property tests take 0.6 s): -vet=off leaves out the vet pass
# go test runs before the tests (make lint vets the tree as written; a mutant only vet objects
# to is not a guard a test holds, and would otherwise count as killed) and -ldflags=-s the
# symbol table and DWARF the tests never read. -failfast ends a mutant's run at its first failed
# test, so most killed mutants skip the model test (~0.9 s of the package's ~1.3 s). GOGC=400 for
# the compiler, linker and tests collects less often; 280 MB each at most. Measured here, idle,
# internal/membership: 402 s as before, 351 s with -failfast (465 killed, 3 lived either way); a
# mutant's go test 2.8-3.0 s, 2.3 s with GOGC=400 (800 no faster; off: 1.1 GB and slower); both: 316 s.
# The tests and their rapid checks stay the same.
MUTATION_GOFLAGS ?= -count=1 -vet=off -ldflags=-s -failfast
MUTATION_GOGC ?= 400
mutate_package = echo "==> $(1): efficacy above $(word 1,$(MUTATION_FLOORS_$(1)))%, mutant coverage above $(word 2,$(MUTATION_FLOORS_$(1)))%"; \
	start=$$SECONDS; floors=$$(mktemp --suffix=.yaml); \
	printf 'unleash:\n  threshold:\n    efficacy: %s\n    mutant-coverage: %s\n' $(MUTATION_FLOORS_$(1)) >$$floors; \
	GOFLAGS="$(MUTATION_GOFLAGS)" GOGC=$(MUTATION_GOGC) $(GREMLINS) unleash --config $$floors --output-statuses lct --timeout-coefficient 10 ./$(1) || failed="$$failed $(1)"; \
	rm -f $$floors; echo "==> $(1): $$((SECONDS - start)) s";

.PHONY: mutation
mutation: $(GREMLINS) ## Mutation testing of the pure packages (MUTATION_PACKAGES): fails when a package's efficacy or mutant coverage drops below its floor.
	@failed=; $(foreach p,$(MUTATION_PACKAGES),$(call mutate_package,$(p))) \
	if [ -n "$$failed" ]; then echo "mutation: below the floor:$$failed"; exit 1; fi

# Guards the mutation tester cannot reach cheaply: in the controllers and the agent, whose tests
# start a kube-apiserver, etcd or an S3 server. hack/guards/guards.yaml lists each guard in front
# of a destructive step with the edit that takes it out and the tests that hold it; each edit is
# given to go test as an -overlay, so the work tree is never changed.
.PHONY: guards
guards: envtest-assets $(CONTROLLER_GEN) $(VERSITYGW) ## Takes out, in turn, each guard in front of a destructive step in the controllers and the agent (hack/guards/guards.yaml), and fails if the tests named for it still pass.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" CONTROLLER_GEN="$(CONTROLLER_GEN)" ETCD_BIN="$(ETCD_BIN)" VERSITYGW="$(VERSITYGW)" \
		go run ./hack/guards
