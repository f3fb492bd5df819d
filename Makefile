# Each target is one `python -m pipeline.<stage>` line. CONFIG picks pipeline/configs/<name>.yaml,
# ARGS adds key=value overrides, e.g.  make train CONFIG=xlmr-large ARGS="train.folds=[0]"
CONFIG ?= sample
ARGS ?=
BLEND ?=
GPUS ?= 1
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RUN = $(PY) -m
comma := ,
space := $(subst ,, )
# GPUS>1 launches one process per device through torchrun (DDP); see README "More than one GPU"
ifneq ($(GPUS),1)
RUN = $(VENV)/bin/torchrun --standalone --nproc_per_node=$(GPUS) -m
endif

.DEFAULT_GOAL := help
.PHONY: help data stage1 train predict cv baseline blend board bench bench-gpu kernel kernel-output kernel-status submit submissions test lint clean venv

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'
	@echo "  CONFIG=$(CONFIG) (pipeline/configs/*.yaml)  ARGS=\"key.sub=value ...\"  GPUS=N (torchrun)"

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $(STAMP)

venv: $(STAMP) ## create .venv from requirements.txt (redone when it changes)

data: $(STAMP) ## acquire the competition, build input/prepared/<name>/folds.csv and the token cache
	$(PY) -m pipeline.data --config $(CONFIG) $(ARGS)

stage1: $(STAMP) ## data and one model for the stage-1 experiment model.init_from names (GPUS=N for DDP)
	$(PY) -m pipeline.stage1 --config $(CONFIG) $(ARGS)
	$(RUN) pipeline.stage1 --train --config $(CONFIG) $(ARGS)

train: $(STAMP) ## train every fold (GPUS=N for DDP); writes models/<name>/
	$(RUN) pipeline.train --config $(CONFIG) $(ARGS)

predict: $(STAMP) ## fold models on test, ensembled into submissions/submission.csv
	$(PY) -m pipeline.predict --config $(CONFIG) $(ARGS)

cv: $(STAMP) ## fold and per-language AUC of what has been trained so far
	$(PY) -m pipeline.cv --config $(CONFIG) $(ARGS)

baseline: $(STAMP) ## TF-IDF + logistic regression on the same folds, side by side with the trained model
	$(PY) -m pipeline.baseline --config $(CONFIG) $(ARGS)

blend: $(STAMP) ## BLEND="exp1 exp2 ...": rank-average with weights fit on OOF (nested); submissions/<blend>.csv
	$(PY) -m pipeline.blend --config $(CONFIG) $(if $(strip $(BLEND)),blend.members=$(subst $(space),$(comma),$(strip $(BLEND)))) $(ARGS)

board: $(STAMP) ## every experiment and blend under models/, best OOF first; models/board.md
	$(PY) -m pipeline.board --config $(CONFIG) $(ARGS)

bench: $(STAMP) ## peak memory and speed of each memory technique, side by side with HF Trainer
	$(PY) -m pipeline.bench --config $(CONFIG) $(ARGS)

bench-gpu: $(STAMP) ## the same for XLM-R large on one CUDA GPU (seq 256, batch 32); models/bench/xlm-roberta-large.*
	$(PY) -m pipeline.bench --config bench-gpu $(ARGS)

kernel: $(STAMP) ## pack the pipeline into a Kaggle dataset and push a GPU notebook
	$(PY) -m pipeline.kernel --config $(CONFIG) $(ARGS)

kernel-output: $(STAMP) ## download a finished Kaggle notebook's output into models/ and submissions/ (a failed one: its log)
	$(PY) -m pipeline.kernel --config $(CONFIG) --output $(ARGS)

kernel-status: $(STAMP) ## the Kaggle notebook's state and the end of its log (FOLLOW=1: until it ends)
	$(PY) -m pipeline.kernel --config $(CONFIG) --status $(if $(FOLLOW),--follow) $(ARGS)

submit: $(STAMP) ## submit submissions/<name>.csv to the competition, wait for the score, record it
	$(PY) -m pipeline.submit --config $(CONFIG) $(ARGS)

submissions: $(STAMP) ## every recorded submission beside its experiment's OOF AUC
	$(PY) -m pipeline.submit --config $(CONFIG) --list $(ARGS)

test: $(STAMP) ## run the test suite (no network)
	$(PY) -m pytest -q

lint: $(STAMP) ## ruff, and the import layers of docs/architecture.md (import-linter)
	$(PY) -m ruff check pipeline tests
	$(VENV)/bin/lint-imports

clean: ## remove generated data, models and submissions (keeps .venv; `make data` itself drops unused token caches)
	find input models submissions -mindepth 1 ! -name .gitkeep -exec rm -rf {} +
