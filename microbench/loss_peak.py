"""Bytes per logit alive at the loss under PyTorch's unfused fp32 cross entropy, measured.

Run: ``python -m microbench.loss_peak [--out peaks.jsonl]`` (a CPU, no GPU, no framework:
torch alone; a few seconds and about 3 GB of memory).

The loss is torchtitan 0.2.2's ``cross_entropy_loss`` (``components/loss.py``:
``F.cross_entropy(pred.flatten(0, 1).float(), labels)``) on the output head's bf16 logits, the
logits deleted before ``loss.backward()`` as its trainer does (``train.py``: ``del pred``; the
project's own training step returns the same loss from its forward, ``microbench.train_step``).
The peak is counted, not sampled: every storage an operator makes while the forward and
backward run is tracked (a ``TorchDispatchMode`` sees the backward's operators too) with a weak
reference, and after each operator the bytes of those still alive are summed; the largest sum,
over the logits' count (tokens x vocabulary), is the bytes per logit. The head's input and
weight (made before) are not counted, their gradients are (a 64-wide sliver beside the
logits). What the loss keeps does not depend on the device: the same operators run on a GPU
(``log_softmax``, ``nll_loss``, their backward), with the same dtypes and shapes; the CPU's
allocator does not enter the count.

The value this measures is ``surrogate.config.framework_traits.UNFUSED_CE_LOGIT_BYTES``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from microbench.fingerprint import collect

SCHEMA = "surrogate.loss_peak/1"
SHAPES: tuple[tuple[int, int], ...] = ((4096, 32768), (8192, 32768), (4096, 65536))
"""(tokens, vocabulary) measured: the bytes per logit hold at every size."""
HIDDEN = 64
"""The head's input width: small, so the logits dominate the resident memory."""


def peak_bytes(tokens: int, vocab: int) -> int:
    """The most bytes alive at once among the storages the loss's forward and backward make."""
    import torch
    import torch.nn.functional as F
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    made: dict[int, tuple[Any, int]] = {}  # address -> (weak ref, bytes)
    peak = 0

    class Track(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            nonlocal peak
            out = func(*args, **(kwargs or {}))
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    st = t.untyped_storage()
                    if st.data_ptr() and st.nbytes():
                        made[st.data_ptr()] = (StorageWeakRef(st), st.nbytes())
            for ptr in [p for p, (ref, _) in made.items() if ref.expired()]:
                del made[ptr]
            peak = max(peak, sum(n for _, n in made.values()))
            return out

    torch.manual_seed(0)
    x = torch.randn(tokens, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(vocab, HIDDEN, dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, vocab, (tokens,))
    with Track():
        pred = x @ w.t()
        loss = F.cross_entropy(pred.float(), y, reduction="sum")
        del pred  # as torchtitan's trainer does before the backward
        loss.backward()
    return peak


def measure(tokens: int, vocab: int) -> dict[str, Any]:
    """One record: the shape, the peak and the bytes per logit."""
    peak = peak_bytes(tokens, vocab)
    return {
        "schema": SCHEMA,
        "loss": "F.cross_entropy(bf16 logits .float(), labels), logits deleted before backward",
        "tokens": tokens,
        "vocab_size": vocab,
        "peak_bytes": peak,
        "bytes_per_logit": peak / (tokens * vocab),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="append the records (JSON lines)")
    args = ap.parse_args(argv)
    fingerprint = collect().to_dict()
    for tokens, vocab in SHAPES:
        record = {**measure(tokens, vocab), "fingerprint": fingerprint}
        print(
            f"{tokens} tokens x {vocab} vocabulary: {record['bytes_per_logit']:.2f} bytes per "
            "logit",
            flush=True,
        )
        if args.out is not None:
            with args.out.open("a") as f:
                f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
