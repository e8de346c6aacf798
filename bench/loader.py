"""python bench/loader.py [args]: gpudecode.bench.suite.loader (its --help says what it measures);
figures in bench/_out/loader.json, summarised in bench/RESULTS.md."""
import os

os.environ.setdefault("GPUDECODE_BENCH_OUT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "_out"))

from gpudecode.bench.suite.loader import main  # noqa: E402

if __name__ == "__main__":
    main()
