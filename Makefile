# Two commands matter to a newcomer: `make book` and `make test` (see README.md).
# Both create the virtual environment first when it is missing.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NBDIR  := _build/nbtest

.PHONY: venv book site notebooks test test-lib bench constraints clean

venv: $(STAMP)

# torch goes in first, pinned, so that nothing later pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt torch==2.13.0
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

# Build the website into _build/html, executing every lesson.
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

# Every page with code cells is converted to .ipynb (nbval reads only notebooks) in a
# scratch folder, keeping its path: lessons/01-x.md -> $(NBDIR)/lessons/01-x.ipynb.
notebooks: $(STAMP)
	rm -rf $(NBDIR) && mkdir -p $(NBDIR)/lessons $(NBDIR)/book
	for page in $$(grep -l -E '^(```+|:::+) *\{code-cell\}' lessons/*.md book/*.md); do \
	  $(BIN)/jupytext --quiet --to ipynb --output $(NBDIR)/$${page%.md}.ipynb $$page || exit 1; \
	done

# Library tests, site and browser tests, and every page executed as a notebook.
# --durations lists the slowest tests and notebook cells; per-lesson execution times
# are in _build/artifacts/execution-times.txt (written by tests/test_site.py).
test: $(STAMP) notebooks
	$(BIN)/python -m pytest tests $(NBDIR) --nbval-lax -n 2 --dist loadfile --durations=10

test-lib: $(STAMP)
	$(BIN)/python -m pytest tests -n 2

bench: $(STAMP)
	$(BIN)/mha bench

constraints:
	rm -rf /tmp/mha-constraints && $(PYTHON) -m venv /tmp/mha-constraints
	/tmp/mha-constraints/bin/pip install --quiet torch==2.13.0 && /tmp/mha-constraints/bin/pip install --quiet ".[dev]"
	{ head -2 constraints.txt; /tmp/mha-constraints/bin/pip freeze | grep -v -e "^-e" -e "^mha-course" | sed 's/+cpu//'; } > constraints.new && mv constraints.new constraints.txt

clean:
	rm -rf _build
