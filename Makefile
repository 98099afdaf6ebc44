# The two commands of the README's Quickstart: `make lab` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8888
JUPYTER_TOKEN ?=
# Without a display (a server, a container, CI) there is no browser to open.
NO_BROWSER := $(if $(or $(DISPLAY),$(WAYLAND_DISPLAY),$(filter Darwin,$(shell uname -s))),,--no-browser)
# Jupyter refuses to run as root unless told to (containers, CI, Colab-like machines run as root).
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)
PYTEST_ARGS ?=

.PHONY: lab test venv notebooks clean

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

venv: $(PY)

# torch first, from the CPU build this machine holds, so that no multi-GB CUDA build is pulled in.
$(VENV)/.torch: | $(PY)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	touch $@

$(VENV)/.lab: pyproject.toml $(VENV)/.torch
	$(PY) -m pip install -q -e ".[lab]"
	touch $@

$(VENV)/.test: pyproject.toml $(VENV)/.torch
	$(PY) -m pip install -q -e ".[test]"
	touch $@

lab: $(VENV)/.lab
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/notebooks \
		--port=$(PORT) --ip=127.0.0.1 --IdentityProvider.token="$(JUPYTER_TOKEN)" $(NO_BROWSER) $(ALLOW_ROOT)

# Unit tests, then every notebook under nbval in smoke mode (small sizes, CPU is enough).
test: $(VENV)/.test
	COURSE_KIT_SMOKE=1 $(PY) -m pytest tests notebooks --nbval-lax --nbval-cell-timeout=600 \
		--timeout=900 -p no:cacheprovider $(PYTEST_ARGS)

# Rebuild notebooks/*.ipynb from notebooks/src/*.py.
notebooks: $(VENV)/.test
	$(PY) -m course_kit.nbbuild

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
