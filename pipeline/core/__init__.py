"""The training core: the three memory techniques and everything a fold's training stands on.

precision (autocast, GradScaler), optim (AdamW, schedule, the window's step), batching (length-grouped
micro-batches, accumulation windows), loop (one epoch, prediction), memory (peak memory, auto-fit),
modeling (the model and its switches), trim (vocabulary trimming), distributed (torchrun, DDP helpers),
resume (resume states) and fold (one fold, trained to the end). It never talks to Kaggle.
"""
