# Two commands matter to a newcomer: `make book` and `make test` (see README.md).
# Both create the virtual environment first when it is missing.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NBDIR  := _build/nbtest

.PHONY: venv book site notebooks nbval seeds test test-lib test-the-tests test-gpu lab bench constraints clean

venv: $(STAMP)

# torch goes in first, pinned, so that nothing later pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

# Build the website into _build/html, executing every lesson (two at a time on two cores,
# in kernels that start with the libraries imported: book/_ext/parallel_execution.py).
book: $(STAMP)
	@$(MAKE) --no-print-directory site

# The build itself (tests/conftest.py runs this same target). From scratch, because an
# incremental Sphinx build does not repeat the warnings of unchanged pages, and -W must
# see them all. -n: broken cross-references are errors too. --keep-going: report every
# problem of a failing build at once, not just the first.
site:
	rm -rf _build/html _build/.doctrees _build/jupyter_execute
	$(BIN)/jupyter-book build . --builder html --path-output . -W -n --keep-going
	@echo "Open _build/html/index.html in a browser."

# Every page with code cells is converted to .ipynb in a scratch folder, keeping its path
# (lessons/01-x.md -> $(NBDIR)/lessons/01-x.ipynb), and executed by nbval. Not part of
# `make test`, which executes each lesson once, in the site build, and checks the pages and
# the executed notebooks of that run; this is a second, independent execution for when a
# contributor wants one without the site.
notebooks: $(STAMP)
	rm -rf $(NBDIR) && mkdir -p $(NBDIR)/lessons $(NBDIR)/book
	for page in $$(grep -l -E '^(```+|:::+) *\{code-cell\}' lessons/*.md book/*.md); do \
	  $(BIN)/jupytext --quiet --to ipynb --output $(NBDIR)/$${page%.md}.ipynb $$page || exit 1; \
	done

nbval: notebooks
	$(BIN)/python -m pytest $(NBDIR) --nbval-lax -n 2 -p no:cacheprovider

# Every lesson executed again on seeds it does not show (tools/seeds.py): each lesson is
# converted to a notebook in _build/seeds, a cell `SEED = s` goes right after its `parameters`
# cell, and nbval executes it (--nbval-lax: every cell must run, every assert must hold). A table
# shows each lesson, seed, time and the first failure. Held-out seeds, far from those a page
# trains: 123, 1000, 2000, 3000 and 4000 for a lesson that trains models (its code uses
# torch.optim), 1000 for the others; a lesson without a `parameters` cell is
# listed and fails the run. SEEDS="4 5 6" picks other seeds, LESSONS="02 13" some lessons.
# Not part of `make test` (it takes minutes); .ci/run calls it after `make test`.
seeds: $(STAMP)
	$(BIN)/python tools/seeds.py $(if $(SEEDS),--seeds $(SEEDS)) $(if $(LESSONS),--lessons $(LESSONS))

# Library, grader, site and browser tests, and the student's path from the website. The
# site build (tests/conftest.py) executes every lesson once, starting at collection while
# the library's tests run; the tests are shared out by file, in file order
# (--no-loadscope-reorder; tests/conftest.py puts the site's tests last), and
# tests/test_executed_notebooks.py checks the notebooks of that execution. --durations lists the slowest tests; lessons over
# their time limit are named at the end (tests/conftest.py), and the per-lesson execution
# times are in _build/artifacts/execution-times.txt. The browser's per-page checks run on a
# sample, one page of each kind; MHA_SITE_PAGES=all make test checks every page, as CI does.
# The grader's own tests (tests/test_the_tests.py) are left out: `make test-the-tests` runs them,
# and CI runs both. The grader's attack suite runs at each isolation level the machine offers,
# and, run as root, again as an ordinary user it makes (tests/test_grader_attacks.py).
test: $(STAMP)
	$(BIN)/python -m pytest tests -n 2 --dist loadfile --no-loadscope-reorder --durations=10 \
	  --ignore=tests/test_the_tests.py

# Everything but the tests that need the built website (tests/conftest.py marks them
# "site"): a quick run while editing src/.
test-lib: $(STAMP)
	$(BIN)/python -m pytest tests -n 2 -m "not site"

# The grader's own tests (tests/test_the_tests.py): every correct answer written in other
# styles gets full marks, every listed mistake and held-out wrong answer loses points, on 400
# hidden draws of every exercise (25 for the kernel exercises, in Triton's interpreter), and
# check agrees with the sandboxed grader. Minutes; CI runs it after `make test`. A quick look
# while writing an exercise: make test-the-tests TEST_SEEDS=5 KERNEL_TEST_SEEDS=2 (under a minute).
TEST_SEEDS        ?= 400
KERNEL_TEST_SEEDS ?= 25
test-the-tests: $(STAMP)
	MHA_TEST_SEEDS=$(TEST_SEEDS) MHA_KERNEL_TEST_SEEDS=$(KERNEL_TEST_SEEDS) $(BIN)/python -m pytest tests/test_the_tests.py -n 2 -p no:cacheprovider

# The Triton kernels of lesson 14 at the lengths a GPU reaches (T = 4096 to 16384), and their
# peak memory against SDPA's; on a machine without a CUDA GPU every test is skipped. `make
# test` runs the same checks at small sizes in Triton's interpreter (tests/test_flash.py), and
# the autograd paths and CS336's check (test_flash_autograd.py, test_flash_cs336.py), run here
# on the GPU too.
test-gpu: $(STAMP)
	$(BIN)/python -m pytest tests/test_flash_gpu.py tests/test_flash.py tests/test_flash_autograd.py tests/test_flash_cs336.py -v -rs

# JupyterLab on the lessons: a lesson's .md opens as a notebook (jupytext) with a double
# click, and `import mha` finds the package installed in .venv in editable mode.
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings
lab: $(STAMP)
	mkdir -p $(LAB_SETTINGS)
	echo '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Jupytext Notebook", "myst": "Jupytext Notebook"}}}' > $(LAB_SETTINGS)/overrides.json
	$(BIN)/jupyter lab --notebook-dir=lessons

bench: $(STAMP)
	$(BIN)/mha bench

constraints:
	rm -rf /tmp/mha-constraints && $(PYTHON) -m venv /tmp/mha-constraints
	/tmp/mha-constraints/bin/pip install --quiet torch==2.13.0 && /tmp/mha-constraints/bin/pip install --quiet ".[dev]"
	{ head -2 constraints.txt; /tmp/mha-constraints/bin/pip freeze | grep -v -e "^-e" -e "^mha-course" | sed 's/+cpu//'; } > constraints.new && mv constraints.new constraints.txt

clean:
	rm -rf _build
