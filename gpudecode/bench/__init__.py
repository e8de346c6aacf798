"""`gpudecode bench`: datasets from real photographs, and the measurements of input
pipelines as a tool: formats x pipelines (`formats`), a trainer's view with 1..W workers
(`train`), storage bandwidth (`io`), and `gpudecode.profile` on a dataset (`profile`).
Each writes a markdown table to stdout, a JSON file with every raw figure and the
machine, and PNG plots (matplotlib: `pip install 'gpudecode[bench]'`)."""
