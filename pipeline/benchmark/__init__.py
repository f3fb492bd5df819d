"""The memory and speed table of `make bench`: each technique's row, ours beside Hugging Face Trainer."""
