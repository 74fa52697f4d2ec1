"""The command line, `python -m gaccum_core run|sweep|plan|check|worker|resume|doctor`: one module per
command (run, sweep, plan, check, worker, resume, doctor; export: TensorBoard event files of runs recorded
before), what they share in args, the progress bars in progress and sweep_progress, and main, which builds the
parser from them.
"""
