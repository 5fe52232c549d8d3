# Two commands matter to a newcomer: `make book` and `make test` (see README.md).
# Both create the virtual environment first when it is missing.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NBDIR  := _build/nbtest

.PHONY: venv book test test-lib test-notebooks bench student-notebooks constraints clean

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
	$(BIN)/jupyter-book build . --builder html --path-output . -W -n --keep-going
	@echo "Open _build/html/index.html in a browser."

# Every page with code is converted to .ipynb and executed by nbval.
$(NBDIR): $(STAMP) $(wildcard lessons/*.md book/*.md)
	rm -rf $(NBDIR) && mkdir -p $(NBDIR)
	$(BIN)/python -m mha.nbconvert_pages --out $(NBDIR) lessons/*.md book/*.md

test: $(STAMP) $(NBDIR)
	$(BIN)/python -m pytest tests $(NBDIR) --nbval-lax -n 2 --dist loadfile

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
