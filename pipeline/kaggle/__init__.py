"""The Kaggle seam: every call to the kaggle library, the plan of a run, and what the notebook needs.

client (the one module that imports kaggle: credentials, the API object, errors in plain words); the calls,
by what they reach: downloads (competition and dataset files), datasets (the code bundle's upload), kernels
(push, state, output, log), submissions; plan (names, sources, kernel-metadata.json, checks), disk (the
disk plan), bundle (the code bundle and the kernel folder), session (Kaggle's folders, mounts and GPUs),
launch (the kernel's code file) and output (`make kernel-output`, `make kernel-status`).
Nothing here runs at import, and nothing imports kaggle until a call is made.
"""
