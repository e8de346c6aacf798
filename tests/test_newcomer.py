"""A newcomer's first hour (issue 39): refusals that fit on a screen, transform=None, a CLI
that answers without importing torch, `gpudecode ops`."""
from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import torchvision.transforms as tv1
import torchvision.transforms.v2 as tv
from conftest import encode, make_shard

import gpudecode
from gpudecode import TransformError
from gpudecode import transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
F32 = T.ToDtype(torch.float32, scale=True)


class UsersOwn:  # a transform of the user's own, in a torchvision Compose
    def __call__(self, x):
        return x


# Every kind of refusal a Compose, a step or the Loader's transform arguments can give
REFUSALS = [
    lambda: T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(224), tv.JPEG(50)])),
    lambda: T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(224), tv.ElasticTransform(), tv.ColorJitter(0.4)])),
    lambda: T.Compose.from_torchvision(tv1.Compose([tv1.RandomResizedCrop(224), tv1.RandomRotation(30, expand=True)])),
    lambda: T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(224), tv.Lambda(lambda x: x)])),
    lambda: T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(224), UsersOwn()])),
    lambda: T.Compose.from_torchvision(lambda x: x),
    lambda: T.Compose.from_torchvision(tv.Compose([tv.RandomChoice([tv.RandomHorizontalFlip(), tv.ColorJitter(0.2)]),
                                                   tv.RandomResizedCrop(8)])),
    lambda: T.Compose.from_torchvision(tv.Compose([tv.Resize(256), tv.TenCrop(224)])),
    lambda: T.Compose.from_torchvision(tv.Compose([tv.CenterCrop(4), tv.LinearTransformation(torch.eye(48),
                                                                                             torch.zeros(48))])),
    lambda: T.Compose.from_torchvision(tv.Compose([tv.ToDtype(torch.float32, scale=True), tv.ToPILImage()])),
    lambda: T.Views.from_torchvision(tv.Compose([tv.RandomResizedCrop(256), tv.FiveCrop(224)])),
    lambda: T.Views.from_torchvision(tv.Compose([tv.TenCrop(224), tv.RandomHorizontalFlip()])),
    lambda: T.Views.from_torchvision(tv1.Compose([tv1.TenCrop(224), tv1.Lambda(lambda c: torch.stack(c))])),
    lambda: gpudecode.Loader("/nonexistent", batch_size=2, transform=tv.Compose([tv.FiveCrop(8), tv.TenCrop(8)])),
    lambda: T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(16), tv.Resize(8)])),
    lambda: T.Compose([T.RandomResizedCrop(8), UsersOwn()]),
    lambda: T.Compose([T.Normalize(MEAN, STD), T.ColorJitter(0.4)]),
    lambda: T.Compose([T.RandomResizedCrop(8), T.RandomHorizontalFlip(), T.ColorJitter(0.4), T.RandomGrayscale(),
                       T.TrivialAugmentWide(), F32, T.Normalize(MEAN, STD), T.ColorJitter(0.4)]),
    lambda: T.Compose([T.RandomResizedCrop(8), T.RandomResizedCrop(8)]),
    lambda: T.Compose([T.RandomRotation(10, expand=True), T.Resize(32)]),
    lambda: T.Compose([T.RandomCrop(8), T.CenterCrop(10)]),
    lambda: T.Compose([T.RandomResizedCrop(8), T.ColorJitter(0.1), T.ColorJitter(0.2)]),
    lambda: T.Compose([F32, T.ColorJitter(0.2), T.RandomResizedCrop(8)]),
    lambda: T.Compose([T.RandomHorizontalFlip(), T.RandAugment(), T.RandomResizedCrop(8)]),
    lambda: T.Compose([F32, T.Normalize(MEAN, STD), T.RandomRotation(10, "bilinear")]),
    lambda: T.Compose([T.RandomHorizontalFlip(), T.Resize((8, 8), interpolation="nearest")]),
    lambda: T.Compose([T.CenterCrop(8), T.RGB(), T.Grayscale()], grey=True),
    lambda: T.Compose([T.RandomResizedCrop(8), T.GaussianBlur(17)]),
    lambda: T.Compose([T.RandomResizedCrop(8), T.ElasticTransform(), T.RandomHorizontalFlip()]),
    lambda: T.Compose.from_torchvision(tv1.RandomChoice([tv1.RandomResizedCrop(8), tv1.CenterCrop(6)])),
    lambda: T.Compose([T.Resize((8, 10)), T.RandomRotation((90, 90), expand=True)]),
    lambda: T.Compose.from_torchvision(tv1.Compose([tv1.ToTensor(), tv1.Resize(8, tv1.InterpolationMode.BICUBIC)])),
    lambda: T.Compose([T.TrivialAugmentWide(), T.TrivialAugmentWide()]),
    lambda: T.Compose([T.RandomResizedCrop(8), T.RandomErasing(), T.ColorJitter(0.1)]),
    lambda: T.Compose([T.RandomResizedCrop(8), T.ToDtype(torch.uint8), T.Normalize(MEAN, STD)]),
    lambda: T.Compose([T.RandomResizedCrop(8), T.ToDtype(torch.float32), T.ColorJitter(0.1)]),
    lambda: T.RandomRotation(10, "bicubic"),
    lambda: T.Compose([T.RandomRotation(10, expand=True), T.ColorJitter(0.1)]),
    lambda: T.RandomCrop(8, padding=2, pad_if_needed=True, padding_mode="reflect"),
    lambda: T.Compose([T.Pad(4, padding_mode="reflect"), T.Resize((8, 8))]),
    lambda: T.Pad(4, padding_mode="wrap"),
    lambda: T.RandomCrop(8, padding=2, fill=(1, 2)),
    lambda: T.GaussianBlur(99),
    lambda: T.RandAugment(magnitude=99),
    lambda: T.TrivialAugmentWide(num_magnitude_bins=1),
    lambda: T.Grayscale(num_output_channels=2),
    lambda: T.Compose([T.RandomResizedCrop(8), T.RandomApply([T.Grayscale()], p=0.5)]),
    lambda: T.Compose([T.RandomResizedCrop(8), T.Grayscale(), T.RandomRotation(10, fill=(1, 2, 3))]),
    lambda: T.MixUp(alpha=0, num_classes=10),
    lambda: T.MixUp(alpha=1.0, num_classes=0),
    lambda: T.RandomChoice([]),
    lambda: gpudecode.Loader("/nonexistent", batch_size=2, transform=[]),
    lambda: gpudecode.Loader("/nonexistent", batch_size=2, transform=tv.Compose([tv.RandomResizedCrop(8), tv.JPEG(50)])),
    lambda: gpudecode.Loader("/nonexistent", batch_size=2, transform=[T.Compose([T.RandomResizedCrop(8)]),
                                                                      T.Compose([])]),
    lambda: gpudecode.Loader("/nonexistent", batch_size=2, transform=T.Compose([T.RandomResizedCrop(8)]),
                             batch_transform=tv.RandomHorizontalFlip()),
    lambda: gpudecode.Loader("/nonexistent", batch_size=2, transform=T.Compose([T.RandomResizedCrop(8)]),
                             batch_transform=T.MixUp(num_classes=10)),
    lambda: gpudecode.Loader("/nonexistent", batch_size=2, transform=T.Compose([T.RandomResizedCrop(8), F32]),
                             batch_transform=42),
]


@pytest.mark.parametrize("make", REFUSALS, ids=range(len(REFUSALS)))
def test_every_refusal_fits_on_a_screen(make):
    """At most 5 lines of at most 100 characters, naming what is refused."""
    with pytest.raises(TransformError) as e:
        make()
    lines = str(e.value).split("\n")
    assert len(lines) <= 5 and max(map(len, lines)) <= 100, str(e.value)
    assert lines[0].strip()


def test_a_refusal_names_the_step_its_real_module_and_the_ways_out():
    with pytest.raises(TransformError) as e:
        T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(224), tv.RandomHorizontalFlip(), tv.JPEG(50)]))
    msg = str(e.value)
    assert msg.startswith("torchvision.transforms.v2.JPEG cannot be fused (step 3 of 3): it re-encodes")
    assert "for images, labels in loader" in msg  # what the Loader yields, not batch.images
    assert "one set of parameters for all its images" in msg  # a torchvision op on a batch draws once
    assert "`gpudecode ops`" in msg
    with pytest.raises(TransformError, match=r"^test_newcomer\.UsersOwn cannot be fused \(step 2 of 2\)"):
        T.Compose.from_torchvision(tv.Compose([tv.RandomResizedCrop(224), UsersOwn()]))


def test_transform_none_is_no_augmentation(tmp_path, photos):
    """transform=None: images decoded as they are (uint8, their own size), Pillow's pixels."""
    from PIL import Image
    import io

    img = photos["astronaut"][:48, :64]
    data = encode(img, "PNG")
    shard = make_shard(tmp_path / "s.tar", [{"__key__": f"{i:03d}", "png": data, "cls": b"1"} for i in range(4)])
    loader = gpudecode.Loader(shard, batch_size=2, transform=None, device="cpu")
    batches = list(loader)
    assert len(batches) == 2
    images, labels = batches[0]
    ref = torch.from_numpy(np.array(Image.open(io.BytesIO(data)).convert("RGB"))).permute(2, 0, 1)
    assert images.dtype == torch.uint8 and images.shape == (2, 3, 48, 64)
    assert torch.equal(images[0], ref) and labels.tolist() == [1, 1]


def _cli(args: list[str], cwd) -> tuple[float, subprocess.CompletedProcess]:
    """Runs the CLI in a fresh interpreter; fails if it imported torch."""
    code = ("import sys\nfrom gpudecode.cli import main\ntry:\n    rc = main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    rc = e.code or 0\nassert 'torch' not in sys.modules, 'torch was imported'\nsys.exit(rc)")
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    return time.perf_counter() - t0, r


def test_the_cli_answers_without_torch(tmp_path, photos):
    """--help, inspect, verify --quick, ops and argument errors: no torch import (a watchdog
    of 2 s here; about 0.1-0.4 s on an idle 2-core VM)."""
    shard = make_shard(tmp_path / "s-000000.tar", [{"__key__": f"{i:03d}", "jpg": encode(photos["coffee"][:32, :40]),
                                                    "cls": b"0"} for i in range(3)])
    from gpudecode.precache import precache

    precache(shard, str(tmp_path / "cache"), size=16)
    for args, rc in ((["--help"], 0), (["inspect", "--help"], 0), (["inspect", shard], 0), (["ops"], 0),
                     (["verify", "--quick", str(tmp_path / "cache")], 0), (["shard", "a", "b", "--shard-size", "-1"], 2),
                     (["verify", str(tmp_path / "missing")], 1)):
        took, r = _cli(args, tmp_path)
        assert r.returncode == rc, (args, r.stdout, r.stderr)
        assert took < 30.0, (args, took)  # (a watchdog for a hang: the CLI's start time is bench/'s to measure)
    took, r = _cli(["inspect", shard], tmp_path)
    assert '"samples": 3' in r.stdout


def test_ops_lists_what_fuses():
    from gpudecode._ops_table import OPS
    from gpudecode.cli import main
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["ops"]) == 0
    text = " ".join(out.getvalue().split())
    for kind, ops in OPS:
        assert kind in text
        for op in ops.replace(";", ",").split(", "):
            assert " ".join(op.split()) in text
    assert max(map(len, out.getvalue().splitlines())) <= 100


def test_shard_reader_is_still_a_torch_iterable_dataset(tmp_path, photos):
    """ShardReader is made without importing torch, and is torch's IterableDataset all the
    same: DataLoader takes it, pickles find it."""
    import pickle

    from gpudecode.io.reader import BaseShardReader, ShardReader

    assert issubclass(ShardReader, torch.utils.data.IterableDataset) and issubclass(ShardReader, BaseShardReader)
    shard = make_shard(tmp_path / "s.tar", [{"__key__": f"{i:03d}", "cls": str(i).encode()} for i in range(5)])
    reader = ShardReader(shard)
    got = [int(s.fields["cls"]) for s in torch.utils.data.DataLoader(reader, batch_size=None)]
    assert got == list(range(5))
    assert type(pickle.loads(pickle.dumps(reader))) is ShardReader


def test_size_conflicts_and_sources_are_said_at_construction(tmp_path, photos):
    """Precached images of several sizes (crop none) with a transform that gives no size:
    refused when the Loader is made, naming the manifest; describe() counts image files as
    files; a missing folder is called what it is."""
    from gpudecode.errors import ShardReadError
    from gpudecode.precache import precache

    shard = make_shard(tmp_path / "s-000000.tar", [{"__key__": f"{i:03d}", "cls": b"0",
                                                    "jpg": encode(photos["coffee"][: 40 + 8 * i, :60])}
                                                   for i in range(3)])
    precache(shard, str(tmp_path / "cache"), size=32)
    with pytest.raises(TransformError, match="precached with crop none") as e:
        gpudecode.Loader(str(tmp_path / "cache"), batch_size=2, transform=None)
    assert "manifest.json" in str(e.value) and "--crop center" in str(e.value)
    ok = gpudecode.Loader(str(tmp_path / "cache"), batch_size=2, transform=T.Compose([T.CenterCrop(16)]))
    assert ok.describe()["shards"] == 1 and "image_files" not in ok.describe()
    gpudecode.Loader(str(tmp_path / "cache"), batch_size=1, transform=None)  # one image a batch: any size
    # a manifest that is not precache's (or a damaged one) says nothing: no foreign error
    other = tmp_path / "other"
    other.mkdir()
    (other / "s-000000.tar").write_bytes((tmp_path / "s-000000.tar").read_bytes())
    for junk in ('{"pixels": [], "transform": 3, "shards": [1]}', "[1, 2]", "not json", '{"pixels": {}}'):
        (other / "manifest.json").write_text(junk)
        gpudecode.Loader(str(other / "s-000000.tar"), batch_size=2, transform=None)

    tree = tmp_path / "tree"
    for c in ("cat", "dog"):
        (tree / c).mkdir(parents=True)
        for i in range(2):
            (tree / c / f"{i}.jpg").write_bytes(encode(photos["coffee"][:24, :32]))
    d = gpudecode.Loader(str(tree), batch_size=2, transform=None).describe()
    assert (d["shards"], d["image_files"], d["file_sources"]) == (0, 4, [str(tree)])
    with pytest.raises(ShardReadError, match=r"^no such file or folder: .*nowhere \(a source is"):
        gpudecode.Loader(str(tmp_path / "nowhere"), batch_size=2, transform=None)
    with pytest.raises(ShardReadError, match=r"^2 of 2 shards do not exist"):
        gpudecode.Loader(str(tmp_path / "x-{0..1}.tar"), batch_size=2, transform=None)


def test_readme_and_docs_stay_inside_the_repository():
    """The README and docs/ name no path outside the repository, and every file of the
    repository they name exists."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    assert len(pages) >= 6
    for page in pages:
        text = page.read_text()
        assert "../shared" not in text and "/work/" not in text, page
        for ref in set(re.findall(r"\b((?:docs|bench|examples|tests)/[\w./-]*\w)", text)):
            if "*" in ref or "<" in ref or ref.startswith(("bench/_", "bench/results/formats-")):
                continue
            assert (root / ref).exists(), f"{page.name} names {ref}, which is not in the repository"
