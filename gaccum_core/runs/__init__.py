"""Runs on disk: the run store and its files, who owns a run, what is damaged, the runs index and the catalog.

files (atomic writes, CSV rows appended whole and followed, a full disk named) → store (the runs directory, the only
writer of a run's files) → claim (which process owns a run) and integrity (damaged files named) → index (the runs
index, a cache of what each folder holds; index_place: whether it may live beside them) → catalog (the runs on disk as
a table: its rows, filters, reads and export; labels: one vocabulary for a run's settings, in legends, chips, sweep
cells and imported runs; run_data: a run's rows for a figure). Imports train and the shared
vocabulary: running runs is gaccum_core.execution, TensorBoard's files gaccum_core.tensorboard.
"""
