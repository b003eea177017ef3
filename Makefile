PYTHON ?= python3

.PHONY: compile compile-one debug install test testinstalled wheel bench bench-fast fuzz lint clean

compile:            ## build the compiled core in place (src/_core/*.so)
	$(PYTHON) setup.py build_ext --inplace

compile-one:        ## build one extension: make compile-one EXT=segment
	PYKFK_EXTENSIONS=$(EXT) $(PYTHON) setup.py build_ext --inplace --build-temp build/tmp-$(EXT)

debug:              ## in-place build with line tracing and PYKFK_DEBUG checks
	PYKFK_DEBUG=1 PYKFK_BUILD_CYTHON_ALWAYS=1 $(PYTHON) setup.py build_ext --inplace

install:            ## editable install with the test extras
	$(PYTHON) -m pip install -e ".[test]"

test: compile       ## the whole suite
	$(PYTHON) -m pytest -q

testinstalled:      ## build a wheel, install it in a fresh venv, import from outside the checkout
	rm -rf build/testinstalled && $(PYTHON) -m pip wheel --no-deps -w build/testinstalled/wheel .
	$(PYTHON) -m venv build/testinstalled/venv
	build/testinstalled/venv/bin/pip install -q build/testinstalled/wheel/*.whl
	cd /tmp && $(CURDIR)/build/testinstalled/venv/bin/python -c \
	  "import pykfk._core as c, pykfk._core.records, pykfk._core.segment, pykfk._core.sendfile, pykfk._core.wire, pykfk._core.metadata, pykfk._core.structs, pykfk._core.regions; \
	   assert c.crc32c(b'123456789') == 0xE3069283; print('installed wheel OK:', c.__file__)"

wheel:              ## the sdist and a manylinux wheel built from it, in dist/ (tools/build_wheels.sh)
	PYTHON=$(PYTHON) bash tools/build_wheels.sh dist

bench: compile      ## pytest-benchmark suites (figures printed against their baselines)
	$(PYTHON) -m pytest bench -q --benchmark-columns=min,median,mean,ops --benchmark-sort=name

bench-fast: compile ## one quick pass of every bench so they never rot
	$(PYTHON) -m pytest bench -q --benchmark-disable

fuzz: compile       ## 10^6 inputs into each fuzz target; failures land in fuzz/crashes/
	for target in request sasl batches; do $(PYTHON) -m fuzz $$target -runs=1000000 || exit 1; done

lint:               ## ruff on the tree, mypy --strict on the broker packages
	$(PYTHON) -m pytest -q tests/test_sourcecode.py

clean:
	rm -rf build dist *.egg-info src/_core/*.so src/_core/*.html
	cd src/_core && for f in *.pyx; do rm -f "$${f%.pyx}.c"; done
