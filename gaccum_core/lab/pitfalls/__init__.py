"""The pitfall gallery: the classic gradient-accumulation bugs, each run against the correct loop on the
same samples and measured against one big batch.

catalog (page text: each pitfall's title, explanation, fix and default settings over BASE_CONFIG) ←
kit (what every image loop gets: model copy, optimizer, scaler, scheduler, micro-batches) ← loops
(the reference, the correct loop and the bugs as the tutorials write them) ← harness (run_pitfall,
run_all); #6 is a setting of the engine, run by sequences. result holds what the runs leave.
The FSDP traps need 2 processes: fsdp_job starts them (fsdp_rank), each running fsdp_loops.
The activation-checkpointing traps are one gradient each, against the same gradient without checkpointing:
checkpointing. The four post-training reports (REPORT_PITFALLS) run their loops (report_loops) beside the
engine's exact rule on pg rollouts: reports.
"""
