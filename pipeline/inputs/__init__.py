"""The data side: the competition's files, the prepared tables, the tokenizer and the token cache.

competition (file names, extra translated files), csvfile (reading CSVs exactly, or refusing them),
tables (the fold table and which rows a fold trains on), tokenizer, tokens (the cache), sample (the
built-in sample competition) and pseudo (pseudo-labelled test rows).
"""
