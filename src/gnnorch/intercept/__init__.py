"""Seams into PyG / PyTorch that the runtime uses while the user's function runs.

`loader`: every `NeighborLoader` built under the runtime (sharding, per-rank batch size, sampler
workers and their cores, epoch timing). `gradsync`: parameters broadcast at a module's first
forward, gradients averaged before every optimizer step, buffers kept equal (`clipnorm`:
`clip_grad_norm_` told the norm of the averaged gradient; `param_order`: parameters paired
across ranks in one order). `layers`: every
MessagePassing call on a sampled batch (trimming, rewrites, the cache's hook). `session` builds
the seams with their collaborators passed in, installs them for the duration of one run and
removes them afterwards.
"""
