"""python bench/gpu.py [args]: gpudecode.bench.suite.gpu (its --help says what it measures);
figures in bench/_out/gpu.json, summarised in bench/RESULTS.md."""
import os
import sys

os.environ.setdefault("GPUDECODE_BENCH_OUT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "_out"))

from gpudecode.bench.suite.gpu import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
