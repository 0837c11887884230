"""Shared by the tests of the dense blocks and of what a forward keeps: a toy block whose saves
are known (defined only where torch is installed; the tests that use it skip without it)."""

from __future__ import annotations

import importlib.util
from typing import Any

if importlib.util.find_spec("torch") is None:
    Toy: Any = None
else:
    import torch

    class Toy(torch.nn.Module):
        """up -> SiLU -> down: SiLU (the block's own code) saves up's output; down saves SiLU's."""

        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(8, 16, bias=False, dtype=torch.bfloat16)
            self.down = torch.nn.Linear(16, 8, bias=False, dtype=torch.bfloat16)

        def forward(self, x: Any) -> Any:
            return self.down(torch.nn.functional.silu(self.up(x)))
