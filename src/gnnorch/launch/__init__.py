"""Processes only: which cores there are, how a plan uses them, and rank processes.

`topology` (usable cores, SMT siblings, NUMA nodes, cgroup quota) and `plan` (core plans and
their assignment to cores) are pure data on the ground floor; `serialize` sends payloads to
ranks; `context` is the per-process rank state; `allocator` sets glibc malloc for training
processes; `supervisor` starts and watches rank processes from the caller's process, `start`
starts one (a fresh interpreter, or warm: forked by the pre-imported `zygote`) and `worker` is
a rank process's entry point. What a rank runs (the seams, the tuner's hooks) is
decided above, in `gnnorch.execute`.
"""
