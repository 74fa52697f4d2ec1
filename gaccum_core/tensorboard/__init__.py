"""TensorBoard both ways: a run's event files written as it trains, and event folders imported as runs.

out (a run's rows and settings as event files in its tb/, and TAGS, their tags); event_files (event folders read with
TensorBoard's own reader) → foreign_names (other programs' tags and hparams named as gaccum's columns and settings) →
importing (each folder stored as a read-only run, through the run store). Imports runs, train and the shared vocabulary.
"""
