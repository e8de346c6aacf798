"""A script that replaced a builtin before the first batch (torchvision's reference and the
scripts that copy its `setup_for_distributed` replace `print` on every rank but the first):
the Loader still works, and the script keeps its print (gpudecode/_builtins.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from conftest import encode, make_shard

UTILS = '''
import builtins as __builtin__


def setup_for_distributed(is_master):
    builtin_print = __builtin__.print

    def print(*args, **kwargs):
        force = kwargs.pop("force", False)
        if is_master or force:
            builtin_print(*args, **kwargs)

    __builtin__.print = print
'''


def test_a_replaced_print_does_not_break_the_first_batch(tmp_path, photos):
    shard = make_shard(tmp_path / "s.tar", [{"__key__": f"{k}", "png": encode(photos["coffee"][:40, :50], "PNG"),
                                             "cls": b"1"} for k in range(4)])
    (tmp_path / "utils.py").write_text(UTILS)
    script = textwrap.dedent(f'''
        import sys
        import utils
        import gpudecode
        from gpudecode import transforms as T

        utils.setup_for_distributed(False)  # as torchvision's reference does on rank 1
        assert "numba" not in sys.modules  # (the import comes with the first Loader)
        loader = gpudecode.Loader({shard!r}, batch_size=2, transform=T.Compose([T.CenterCrop(32)]), device="cpu",
                                  num_workers=1)
        n = sum(len(b.keys) for b in loader)
        import builtins
        print("batches of", n, "images; print is the script's:", builtins.print.__module__, force=True)
        print("silenced on this rank")
    ''')
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    p = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "batches of 4 images; print is the script's: utils" in p.stdout
    assert "silenced" not in p.stdout
