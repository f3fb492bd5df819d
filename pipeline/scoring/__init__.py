"""How predictions are scored and combined: AUC, the CV report, submissions, blend weights."""
