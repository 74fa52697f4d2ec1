"""Runs: training configs in the background and keeping each run's directory.

files (atomic writes, CSV rows appended whole and followed, a full disk named) → tensorboard (a run's
rows and settings as TensorBoard event files, its tb/, and TAGS, their tags) → store (the runs
directory) → claim (which process owns a run) and integrity (damaged files named) → catalog (the
runs on disk as a table); resume (a stopped run made ready to go on, for the runner and for the run's
own process, through train.checkpoint's manager); execute (one run in this process) → worker (a run in a child process) and
supervisor (watching that child; rank_failures: which rank failed a torchrun job) → spares (the warm spare
worker and torchrun job, and when an idle job ends) → executors (thread or process) → runner (queues per device, snapshot: what a UI polls). aside runs a page's
computation on your own code in a process of its own. Imports the shared vocabulary and train.
"""
