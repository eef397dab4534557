"""Seams into PyG / PyTorch that the runtime uses while the user's function runs.

`loader`: every `NeighborLoader` built under the runtime (sharding, per-rank batch size, sampler
workers and their cores, epoch timing). `gradsync`: parameters broadcast at a module's first
forward, gradients averaged before every optimizer step, buffers kept equal. `session` installs
the seams for the duration of one run and removes them afterwards.
"""
