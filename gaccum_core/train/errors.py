"""How a run's training fails in ways a user can act on: the compiler, or a diverged loss."""

from __future__ import annotations


class CompileError(RuntimeError):
    """torch.compile could not compile the model on this device."""


class Diverged(ArithmeticError):
    """The loss became NaN or inf with no GradScaler to skip the step: training cannot recover."""

    def __init__(self, step: int, loss: float) -> None:
        self.step = step
        super().__init__(f"the loss became {loss} at optimizer step {step}: lower the learning rate, "
                         "set gradient clipping, or check the data")
