"""The chain of `make recipe`: its steps (steps.py) and its plan (plan.py); pipeline/recipe.py runs it."""
