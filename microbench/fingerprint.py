"""Where a measurement was taken: GPU, software versions, node count, a hashed hostname."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True, kw_only=True)
class Fingerprint:
    """The hardware and software of one microbenchmark run (stored with every record)."""

    gpu_name: str
    """``torch.cuda.get_device_name()``, or ``cpu`` when measured on the CPU."""
    gpu_count: int
    """GPUs visible on this node (0 on CPU)."""
    world_size: int
    """Processes taking part (1 for GEMMs)."""
    nodes: int
    """Nodes taking part."""
    driver: str | None
    cuda: str | None
    nccl: str | None
    torch: str
    backend: str
    """``nccl``, ``gloo`` or ``none`` (GEMMs)."""
    hostname_hash: str
    """First 12 hex digits of sha256(hostname): tells nodes apart without naming them."""
    date: str
    """UTC time the run started, ISO 8601."""
    run_id: str
    """Identifies the run: equal on every rank (rank 0's value is broadcast)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _driver_version() -> str | None:
    """The NVIDIA driver version from nvidia-smi, or None when it is not available."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    first = out.strip().splitlines()
    return first[0].strip() if first else None


def node_count(world_size: int) -> int:
    """Nodes in the job: Slurm's count when set, else world / local world (torchrun)."""
    for var in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    if local.isdigit() and int(local) > 0:
        return max(1, world_size // int(local))
    return 1


def collect(
    *, world_size: int = 1, backend: str = "none", run_id: str | None = None
) -> Fingerprint:
    """The fingerprint of this process's machine (imports torch)."""
    import torch

    cuda = torch.cuda.is_available()
    nccl: str | None = None
    if cuda:
        try:
            v = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]
            nccl = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except (AttributeError, RuntimeError):
            nccl = None
    return Fingerprint(
        gpu_name=torch.cuda.get_device_name() if cuda else "cpu",
        gpu_count=torch.cuda.device_count() if cuda else 0,
        world_size=world_size,
        nodes=node_count(world_size),
        driver=_driver_version() if cuda else None,
        cuda=torch.version.cuda if cuda else None,
        nccl=nccl,
        torch=torch.__version__,
        backend=backend,
        hostname_hash=hashlib.sha256(socket.gethostname().encode()).hexdigest()[:12],
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        run_id=run_id or uuid.uuid4().hex[:12],
    )
