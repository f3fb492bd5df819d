# Each target runs one stage: `python -m pipeline <stage> --config NAME --args "key=value ..."`. CONFIG picks
# pipeline/configs/<name>.yaml, ARGS adds overrides, e.g.  make train CONFIG=xlmr-large ARGS="train.folds=[0]"
# CONFIG, ARGS, BLEND and GPUS reach the commands through the environment, each in double quotes: the shell
# never runs what they hold (ARGS='name=x;touch y': "error: override 'y' is not key=value", nothing run), nor does
# make: `$(shell ...)` in them stays text.
CONFIG ?= sample
ARGS ?=
BLEND ?=
GPUS ?= 1
# taken literally: make would expand `$(...)` in them (`$(shell ...)` run, a lone `$` dropped) when it exports them;
# `override` because a command-line variable can be changed only by it, `:=` so the text is never expanded again
override CONFIG := $(value CONFIG)
override ARGS := $(value ARGS)
override BLEND := $(value BLEND)
override GPUS := $(value GPUS)
export CONFIG ARGS BLEND GPUS
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
STAGE = $(PY) -m pipeline
OPTS = --config "$$CONFIG" --args "$$ARGS"
# GPUS>1 launches one process per device through torchrun (DDP), errors in one line; see docs/stages.md "More than
# one GPU"
RUN = $(STAGE)
ifneq ($(GPUS),1)
RUN = $(PY) -m pipeline.core.launcher "$$GPUS"
endif
CHECK_GPUS = case "$$GPUS" in ''|*[!0-9]*|0*) echo "error: GPUS=$$GPUS: the number of processes, a whole number from 1 (GPUS=2: two GPUs)" >&2; exit 2;; esac

# the stages are declared once, in pipeline/stages.py (read with the system python: .venv may not exist yet);
# a stage without a recipe of its own below runs as `python -m pipeline <stage> --config ... --args ...`
STAGES := $(shell $(PYTHON) -m pipeline.stages names)
OWN_RECIPE := stage1 train predict blend

.DEFAULT_GOAL := help
.PHONY: help $(STAGES) bench-gpu gpu-check kernel-output kernel-status submissions test unit mutate lint clean venv

help: ## list the targets
	@$(PYTHON) -m pipeline.stages help
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'
	@echo "  CONFIG=$$CONFIG (pipeline/configs/*.yaml)  ARGS=\"key.sub=value ...\"  GPUS=N (torchrun)"

# pip pinned like the requirements: an unpinned upgrade installs whatever the index serves that day
PIP_VERSION := 26.3
$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet pip==$(PIP_VERSION)
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

venv: $(STAMP) ## create .venv from requirements.txt (redone when it changes)

$(filter-out $(OWN_RECIPE),$(STAGES)): $(STAMP)
	$(STAGE) $@ $(OPTS)

stage1: $(STAMP)
	@$(CHECK_GPUS)
	$(STAGE) stage1 $(OPTS)
	$(RUN) stage1 --train $(OPTS)

train: $(STAMP)
	@$(CHECK_GPUS)
	$(RUN) train $(OPTS)

predict: $(STAMP)
	@$(CHECK_GPUS)
	$(RUN) predict $(OPTS)

blend: $(STAMP)
	$(STAGE) blend $(OPTS) --members "$$BLEND"

bench-gpu: $(STAMP) ## the same for XLM-R large on one CUDA GPU (seq 256, batch 32); models/bench/xlm-roberta-large.*
	$(STAGE) bench --config bench-gpu --args "$$ARGS"

gpu-check: $(STAMP) ## on one CUDA GPU: precision, fp16/bf16 vs fp32, OOM halving, bench-gpu, NCCL; models/gpu-check/
	$(PY) -m pipeline.benchmark.gpucheck --args "$$ARGS"

kernel-output: $(STAMP) ## download a finished Kaggle notebook's output into models/ and submissions/ (a failed one: its log)
	$(STAGE) kernel $(OPTS) --output

kernel-status: $(STAMP) ## the Kaggle notebook's state and the end of its log (FOLLOW=1: until it ends)
	$(STAGE) kernel $(OPTS) --status $(if $(FOLLOW),--follow)

submissions: $(STAMP) ## every recorded submission beside its experiment's OOF AUC
	$(STAGE) submit $(OPTS) --list

# one torch thread a worker: workers that each start a thread a core wait on each other at every op
test: $(STAMP) ## run the test suite (no network), one worker a core
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n auto --dist worksteal

# the tests that start no process (pytest -m e2e) and are not end-to-end runs (slow); see docs/testing.md
unit: $(STAMP) ## the unit layer alone: no subprocesses, no end-to-end runs (docs/testing.md)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n auto --dist worksteal -m "not slow and not e2e"

# minutes, so in neither `make test` nor CI: a habit before trusting a change to how results are made; one module:
# .venv/bin/python scripts/mutate.py pipeline/scoring/blending.py (docs/testing.md, "Mutation testing")
mutate: $(STAMP) ## mutmut over the modules where results are made, each against its own tests (mutants/)
	OMP_NUM_THREADS=1 nice -n 15 $(PY) scripts/mutate.py

lint: $(STAMP) ## ruff, and the import layers of docs/architecture.md (import-linter)
	$(PY) -m ruff check pipeline tests scripts
	$(PY) -m ruff format --check pipeline tests scripts
	$(VENV)/bin/lint-imports

clean: ## remove generated data, models and submissions (keeps .venv; `make data` itself drops unused token caches)
	find input models submissions -mindepth 1 ! -name .gitkeep -exec rm -rf {} +
