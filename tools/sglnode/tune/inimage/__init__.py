"""Scripts that run inside the SGLang image (python3 of the image, its torch, Triton and NCCL), never
imported by sglnode itself: the host mounts this directory read-only and runs them with docker.

  moe_probe.py        SGLang's own fused-MoE config lookup for given shapes (no GPU needed)
  allreduce_sweep.py  all-reduce latency/bandwidth per NCCL env variant and TP group (nccl on GPUs;
                      gloo on CPU exercises the same code path in CI)
  moe_tune.py         times SGLang's fused_moe over a config search space on a GPU and writes
                      SGLang-format config JSON into a config cache root
"""
