"""python bench/resident.py [args]: gpudecode.bench.suite.resident (its --help says what it measures);
figures in bench/_out/resident.json, summarised in bench/RESULTS.md."""
import os

os.environ.setdefault("GPUDECODE_BENCH_OUT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "_out"))

from gpudecode.bench.suite.resident import main  # noqa: E402

if __name__ == "__main__":
    main()
