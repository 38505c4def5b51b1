# MLX Service. `make run` and `make test` do their own set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# MLX's CPU wheel ships a slow reference BLAS; OpenBLAS (if installed) makes float32 matmuls ~30x faster.
OPENBLAS := $(firstword $(wildcard /usr/lib/*/openblas-pthread/libopenblas.so.0 /usr/lib/*/libopenblas.so.0))
BENCH_ENV := $(if $(OPENBLAS),LD_PRELOAD=$(OPENBLAS))

.PHONY: setup run test lint bench soak clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[test]"
	@touch $@

run: setup
	$(VENV)/bin/mlx-service serve

lint: setup
	tools/catalog lint
	$(VENV)/bin/ruff check service tests bench

test: setup
	tools/catalog lint
	$(PY) -m pytest -q

bench: setup
	$(BENCH_ENV) $(PY) bench/catalog.py
	$(BENCH_ENV) $(PY) bench/memory.py
	$(BENCH_ENV) $(PY) bench/serve.py
	$(BENCH_ENV) $(PY) bench/concurrency.py
	$(BENCH_ENV) $(PY) bench/structured.py
	$(BENCH_ENV) $(PY) bench/kinds.py
	$(PY) bench/pull.py

soak: setup  # 30 minutes of mixed traffic, RSS sampled (bench/soak.py --minutes N for less)
	$(BENCH_ENV) $(PY) bench/soak.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache bench/results
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
