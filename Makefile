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
# Test files (a notebook is one file, so its cells stay in order in one kernel) spread over two
# processes: much of the suite waits on subprocesses (JupyterLab, kernels, sandboxes, gloo ranks).
TEST_WORKERS ?= 2

.PHONY: lab test venv notebooks solved wheel clean

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

venv: $(PY)

# torch first (course_kit/torch_install.py): with no NVIDIA GPU here (no nvidia-smi), its CPU build from
# PyTorch's CPU wheel index, so that no multi-GB CUDA build is pulled in; where that index cannot be
# reached, the default index (it says so). With an NVIDIA GPU, the default index's CUDA build.
TORCH_VERSION ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
$(VENV)/.torch: | $(PY)
	$(PY) -m course_kit.torch_install --python $(PY) --version $(TORCH_VERSION) --cpu-index $(TORCH_CPU_INDEX)
	touch $@

# JupyterLab saves widget state into the notebook, and a widget whose state is gone is saved as a
# "re-run this cell" note (course_kit/lab.py), so a reopened notebook never says "model not found".
$(VENV)/.lab: pyproject.toml $(VENV)/.torch
	$(PY) -m pip install -q -e ".[lab]"
	$(PY) -m course_kit.lab $(VENV)
	touch $@

$(VENV)/.test: pyproject.toml $(VENV)/.torch
	$(PY) -m pip install -q -e ".[test]"
	touch $@

lab: $(VENV)/.lab
	mkdir -p $(WORK)
	for nb in notebooks/*.ipynb; do [ -e "$(WORK)/$${nb##*/}" ] || cp "$$nb" "$(WORK)/"; done
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/$(WORK) \
		--ContentsManager.pre_save_hook=course_kit.lab.pre_save \
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
		--timeout=900 -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The solved build (instructors: `course-kit release`/`grade` take it as their source); generated.
solved: $(VENV)/.test
	$(PY) -m course_kit.nbbuild --solved build/solved

# Rebuild notebooks/*.ipynb (the learner's build) from notebooks/src/*.py.
notebooks: $(VENV)/.test
	$(PY) -m course_kit.nbbuild

# The course wheel, for Colab without a published repository: dist/course_kit-*.whl holds the package
# with its records and traces. Upload it in Colab's Files panel (or put it in My Drive); every
# notebook's setup cell installs it from there. Built from a clean copy (a stale build/lib never leaks in).
wheel: | $(PY)
	$(PY) -m course_kit.colab wheel --out dist

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
