#!/bin/sh
# bench.sh - the benchmarks need the worker and executor (not built yet).
echo "bench: no benchmarks yet: they measure the worker, which is not built yet" >&2
exit 0
