# Each target runs one stage: `python -m pipeline <stage> --config NAME --args "key=value ..."`. CONFIG picks
# pipeline/configs/<name>.yaml, ARGS adds overrides, e.g.  make train CONFIG=xlmr-large ARGS="train.folds=[0]"
# CONFIG, ARGS, BLEND and GPUS reach the commands through the environment, each in double quotes: the shell
# never splits or runs what they hold (ARGS='name=x;touch y' is one override, refused as a bad name).
CONFIG ?= sample
ARGS ?=
BLEND ?=
GPUS ?= 1
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

.DEFAULT_GOAL := help
.PHONY: help data stage1 train predict cv baseline blend board leaks bench bench-gpu kernel kernel-output kernel-status submit submissions test lint clean venv

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'
	@echo "  CONFIG=$$CONFIG (pipeline/configs/*.yaml)  ARGS=\"key.sub=value ...\"  GPUS=N (torchrun)"

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

venv: $(STAMP) ## create .venv from requirements.txt (redone when it changes)

data: $(STAMP) ## acquire the competition, build input/prepared/<name>/folds.csv and the token cache
	$(STAGE) data $(OPTS)

stage1: $(STAMP) ## data and one model for the stage-1 experiment model.init_from names (GPUS=N for DDP)
	@$(CHECK_GPUS)
	$(STAGE) stage1 $(OPTS)
	$(RUN) stage1 --train $(OPTS)

train: $(STAMP) ## train every fold (GPUS=N for DDP); writes models/<name>/
	@$(CHECK_GPUS)
	$(RUN) train $(OPTS)

predict: $(STAMP) ## fold models on test, ensembled into submissions/submission.csv (GPUS=N: the folds shared)
	@$(CHECK_GPUS)
	$(RUN) predict $(OPTS)

cv: $(STAMP) ## fold and per-language AUC of what has been trained so far
	$(STAGE) cv $(OPTS)

baseline: $(STAMP) ## TF-IDF + logistic regression on the same folds, side by side with the trained model
	$(STAGE) baseline $(OPTS)

blend: $(STAMP) ## BLEND="exp1 exp2 ...": rank-average with weights fit on OOF (nested); submissions/<blend>.csv
	$(STAGE) blend $(OPTS) --members "$$BLEND"

board: $(STAMP) ## every experiment and blend under models/, best six-language OOF first; models/board.md
	$(STAGE) board $(OPTS)

leaks: $(STAMP) ## held-out translated rows checked by content for twins among their folds' training rows
	$(STAGE) leaks $(OPTS)

bench: $(STAMP) ## peak memory and speed of each memory technique, side by side with HF Trainer
	$(STAGE) bench $(OPTS)

bench-gpu: $(STAMP) ## the same for XLM-R large on one CUDA GPU (seq 256, batch 32); models/bench/xlm-roberta-large.*
	$(STAGE) bench --config bench-gpu --args "$$ARGS"

kernel: $(STAMP) ## pack the pipeline into a Kaggle dataset and push a GPU notebook
	$(STAGE) kernel $(OPTS)

kernel-output: $(STAMP) ## download a finished Kaggle notebook's output into models/ and submissions/ (a failed one: its log)
	$(STAGE) kernel $(OPTS) --output

kernel-status: $(STAMP) ## the Kaggle notebook's state and the end of its log (FOLLOW=1: until it ends)
	$(STAGE) kernel $(OPTS) --status $(if $(FOLLOW),--follow)

submit: $(STAMP) ## submit submissions/<name>.csv to the competition, wait for the score, record it
	$(STAGE) submit $(OPTS)

submissions: $(STAMP) ## every recorded submission beside its experiment's OOF AUC
	$(STAGE) submit $(OPTS) --list

# one torch thread a worker: workers that each start a thread a core wait on each other at every op
test: $(STAMP) ## run the test suite (no network), one worker a core
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n auto --dist loadfile

lint: $(STAMP) ## ruff, and the import layers of docs/architecture.md (import-linter)
	$(PY) -m ruff check pipeline tests
	$(PY) -m ruff format --check pipeline tests
	$(VENV)/bin/lint-imports

clean: ## remove generated data, models and submissions (keeps .venv; `make data` itself drops unused token caches)
	find input models submissions -mindepth 1 ! -name .gitkeep -exec rm -rf {} +
