# Two entry points for a fresh machine with Python >= 3.11: `make demo` and `make test`.
PYTHON ?= python3
UV = $(PYTHON) -m uv
OUT ?= out/demo

.PHONY: install system-packages demo test lint

install:  ## create .venv with the locked dependencies
	$(PYTHON) -m pip install --quiet --disable-pip-version-check uv
	$(UV) sync --frozen --quiet --compile-bytecode

demo: install  ## the end-to-end demo on the built-in simulated clusters, the predictor's loop closed
	$(UV) run --frozen cpn demo --estimates predictor --out $(OUT)

system-packages:  ## the Debian packages the tests start for real (installed as root; else the command to run)
	bash scripts/system-packages.sh

test: install system-packages  ## the whole test suite (unit, contract, integration with real local servers, end-to-end)
	$(UV) run --frozen pytest -q

lint: install  ## ruff and the import-layer contracts
	$(UV) run --frozen ruff check .
	$(UV) run --frozen lint-imports
