# The two commands of the README's Quickstart: `make lab` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8888
# JupyterLab makes its own token (printed in the log) unless JUPYTER_TOKEN is set: an empty token
# would turn authentication off, letting anyone on the machine run code as you.
TOKEN_ARG := $(if $(JUPYTER_TOKEN),--IdentityProvider.token="$(JUPYTER_TOKEN)",)
# The learner works in work/ (git-ignored): notebooks/ is copied there on first use, a file at a time,
# never over an existing one, so tracked files stay clean. Delete a file from work/ to start it afresh.
WORK ?= work
# Without a display (a server, a container, CI) there is no browser to open.
NO_BROWSER := $(if $(or $(DISPLAY),$(WAYLAND_DISPLAY),$(filter Darwin,$(shell uname -s))),,--no-browser)
# Jupyter refuses to run as root unless told to (containers, CI, Colab-like machines run as root).
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)
PYTEST_ARGS ?=

.PHONY: lab test venv notebooks solved clean

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
	mkdir -p $(WORK)
	for nb in notebooks/*.ipynb; do [ -e "$(WORK)/$${nb##*/}" ] || cp "$$nb" "$(WORK)/"; done
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/$(WORK) \
		--port=$(PORT) --ip=127.0.0.1 $(TOKEN_ARG) $(NO_BROWSER) $(ALLOW_ROOT)

# Unit tests, then every notebook under nbval in smoke mode (small sizes, CPU is enough). Both builds
# run: build/ci/NN.ipynb is the learner's notebook top to bottom (every cell but the exercise and
# check cells must run clean), then, in the same kernel, the solved build from its first exercise on
# (every check must pass). The cells before the first exercise are the same in both builds, so they
# run once (course_kit.nbbuild.ci_notebook).
test: $(VENV)/.test
	rm -rf build/ci
	$(PY) -m course_kit.nbbuild --ci build/ci
	COURSE_KIT_SMOKE=1 $(PY) -m pytest tests build/ci --nbval-lax --nbval-cell-timeout=600 \
		--timeout=900 -p no:cacheprovider $(PYTEST_ARGS)

# The solved build (instructors: `course-kit release`/`grade` take it as their source); generated.
solved: $(VENV)/.test
	$(PY) -m course_kit.nbbuild --solved build/solved

# Rebuild notebooks/*.ipynb (the learner's build) from notebooks/src/*.py.
notebooks: $(VENV)/.test
	$(PY) -m course_kit.nbbuild

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
