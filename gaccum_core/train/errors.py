"""How a run's training fails in ways a user can act on: the compiler, or a diverged loss."""

from __future__ import annotations

from gaccum_core.words import first_line

# What torch says, from 2.4 to 2.14, on touching a tensor whose CUDA-graph memory a later graph run reused: with k > 1
# under reduce-overhead or max-autotune, the .grad the previous micro-batch's backward left (pytorch #169545).
CUDA_GRAPHS_OVERWRITTEN = "of CUDAGraphs that has been overwritten by a subsequent run"


class CompileError(RuntimeError):
    """torch.compile could not compile the model on this device."""


def compile_error(exc: BaseException, mode: str, device: object) -> CompileError | None:
    """exc as a one-line CompileError with what to set instead, where torch.compile(mode) raised it (inside dynamo or
    inductor, or CUDA graphs overwriting a tensor still in use); None for any other error or with compile off."""
    if mode == "off":
        return None
    overwritten = CUDA_GRAPHS_OVERWRITTEN in str(exc)
    if not overwritten and not type(exc).__module__.startswith(("torch._dynamo", "torch._inductor")):
        return None
    instead = ("Set compile to off or default, or accum_steps to 1: its CUDA graphs reuse the memory of the .grad "
               "being accumulated (pytorch #169545)." if overwritten else "Set compile to off.")
    return CompileError(f"torch.compile(mode={mode!r}) failed on {device}: {first_line(exc, 300)}. {instead}")


class Diverged(ArithmeticError):
    """The loss became NaN or inf with no GradScaler to skip the step: training cannot recover."""

    def __init__(self, step: int, loss: float) -> None:
        self.step = step
        super().__init__(f"the loss became {loss} at optimizer step {step}: lower the learning rate, "
                         "set gradient clipping, or check the data")
