"""The memory planner: for an effective batch and a memory budget, which micro-batch fits with which
options. Pure: search (sizes to measure, around memory_line's prediction of the budget line), speed
(step times to samples/s ± a 95% interval, timing in turns), ranking (ties and the recommendation's
words), sharding (training memory per rank for ddp, fsdp/every, fsdp/last from one process's parts),
modes (the recommendation across sharding modes, by memory), progress (how far a plan is). probe
measures memory and times speeds on the engine; planner (make_plan) drives them; costs measures what
costly options cost on this machine. Imports the shared vocabulary and train.
"""
