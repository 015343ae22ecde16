"""One rank of a torchrun job (tests/integration/test_torchrun.py): validates its share of step 1.

Started by torchrun, on CPU with the gloo backend. Everything else comes from the documented
environment: ``OTEL_VALGEN_RUN_ID``, and ``OTEL_EXPORTER_OTLP_ENDPOINT`` when a collector is used.
"""

from __future__ import annotations

import sys

import torch.distributed as dist

import otel_valgen as vg


def main() -> None:
    """Join the process group, validate every prompt i with i % world == rank, wait for the others."""
    prompts = int(sys.argv[1])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ids = [f"prompt-{i:03d}" for i in range(prompts) if i % world == rank]
    answers = [f"answer {i} by rank {rank}" for i in ids]
    with vg.validation(step=1, sources_expected=world):
        vg.log_generations([f"question {i}" for i in ids], answers, [0.5] * len(ids), sample_ids=ids)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
