"""`verify`: does your own training loop accumulate as one big batch does? The same batch split every way, the
window's gradients compared, and the mistake named when they differ (loop: your file and batch; splits: which
splits; fit: the diagnosis; check: the check and its report)."""
