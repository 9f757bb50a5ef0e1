"""Target-family schedules for GPUs (OpenCL, CUDA): loops bound to blocks and threads, tiles in
shared memory, accumulators in registers; every number from the config or the target descriptor."""
