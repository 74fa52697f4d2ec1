"""The lab: the Equivalence check (one big batch against its micro-batches) and its verdict (which
modules differ, and the causes found on the model), the loop code a run trains with (loopcode, and
fsdp_loop for the lines sharding changes,
loopcode_records for the records tasks' weighting and order), and the pitfalls (the tutorials' deliberate
bugs, written apart from the engine). Imports the shared vocabulary, models, data and train.
"""
