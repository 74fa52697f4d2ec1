"""Running runs: a run trained in this process, in a worker or over torchrun, watched, queued and resumed.

execute (one run in this process) → worker (a run in a child process) and supervisor (watching that child;
rank_failures: which rank failed a torchrun job) → spares (the warm spare worker and torchrun job, and when an idle job
ends; server_env: the environment they inherit) → executors (thread or process) → runner (device_queue: a run holds
every GPU, queued fairly; snapshot: what a UI polls). resume makes a stopped run ready to go on, for the runner and for
the run's own process; aside runs a page's computation on your own code in a process of its own. Imports tensorboard,
runs, train, data and the shared vocabulary.
"""
