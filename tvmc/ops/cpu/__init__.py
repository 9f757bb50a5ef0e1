"""Target-family schedules for CPUs (x86, aarch64, wasm32)."""
