# MLX Service. `make run` and `make test` do their own set-up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# MLX's CPU wheel ships a slow reference BLAS; OpenBLAS (if installed) makes float32 matmuls ~30x faster.
OPENBLAS := $(firstword $(wildcard /usr/lib/*/openblas-pthread/libopenblas.so.0 /usr/lib/*/libopenblas.so.0))
BENCH_ENV := $(if $(OPENBLAS),LD_PRELOAD=$(OPENBLAS))

.PHONY: setup browser run test lint bench soak clean

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

# The web UI's tests drive the system's headless chromium: installed when missing where we may (root or sudo -n,
# apt-get); elsewhere those tests are skipped with a message saying what to install.
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  sudo=$$( [ "$$(id -u)" = 0 ] && echo "" || { sudo -n true 2>/dev/null && echo "sudo -n"; } || echo none ); \
	  if [ "$$sudo" != none ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium and chromium-driver for the web UI tests"; \
	    $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 || \
	    { $$sudo apt-get update -qq >/dev/null 2>&1 && $$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1; } || \
	    echo "could not install chromium and chromium-driver: the web UI tests will be skipped"; \
	  else echo "no chromium/chromedriver and no way to install them (root or sudo, apt-get): the web UI tests will be skipped"; fi; }

test: setup browser
	tools/catalog lint
	$(PY) -m pytest -q

bench: setup
	$(BENCH_ENV) $(PY) bench/catalog.py
	$(BENCH_ENV) $(PY) bench/memory.py
	$(BENCH_ENV) $(PY) bench/serve.py
	$(BENCH_ENV) $(PY) bench/concurrency.py
	$(BENCH_ENV) $(PY) bench/structured.py
	$(BENCH_ENV) $(PY) bench/kinds.py
	$(BENCH_ENV) $(PY) bench/prefix_disk.py
	$(BENCH_ENV) $(PY) bench/spill.py
	$(BENCH_ENV) $(PY) bench/metrics_cost.py
	$(PY) bench/pull.py

soak: setup  # 30 minutes of mixed traffic, RSS sampled (bench/soak.py --minutes N for less)
	$(BENCH_ENV) $(PY) bench/soak.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache bench/results
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
