"""The full training input pipeline on this machine's cores, in one run:
RandomResizedCrop(224) + flip + ColorJitter(0.4, 0.4, 0.4, 0.1) + Normalize on
ImageNet-like JPEGs (500x375, quality 90):

- gpudecode.Loader from tar shards (CPU path, --threads threads);
- the Loader given the torch Dataset objects a script builds, with their torchvision
  transform: an ImageFolder (read from its files), and a script's own Dataset over the
  same files (OwnDataset, which opens each image with PIL) that lists its files' paths (read
  from its files) or keeps names under a folder (read through its __getitem__);
- torchvision classic: ImageFolder + PIL + the same transforms in a DataLoader with
  --threads workers; and the same without ColorJitter;
- DALI's CPU pipeline doing the equivalent (file reader, random-crop decode, resize,
  flip, brightness/contrast, hsv, normalize) with --threads threads.

    python bench/loader.py [--images 2048] [--threads 2]
    python bench/loader.py --splits   the Loader with split shard, sample and elastic
    python bench/loader.py --captions image-text pairs (CLIP-style): the Loader with
        fields="txt" against webdataset's pipeline as OpenCLIP builds it
    python bench/loader.py --masks    segmentation (images with palette-PNG masks):
        torchvision's segmentation reference recipe, the Loader with a Mask field against
        torchvision v2 moving a tv_tensors.Mask over webdataset in a DataLoader
    python bench/loader.py --boxes    detection (images with COCO annotations): the
        large-scale-jitter recipe at 640, the Loader with a Boxes field against torchvision
        v2 moving tv_tensors.BoundingBoxes (and SanitizeBoundingBoxes) over webdataset
    python bench/loader.py --boxes --recipe ssd   SSD's recipe (torchvision's "ssd" preset):
        RandomZoomOut, RandomIoUCrop (its crop drawn from the boxes), Resize((300, 300)),
        flip, RandomPhotometricDistort
    python bench/loader.py --masks --rotate 15   (or --boxes) with RandomRotation(15) after
        the flip in both pipelines: the masks and boxes through a warp
    python bench/loader.py --masks --precache 256   segmentation from tensor shards: the set
        precached with its masks moved there (--mask) against the Loader moving each
        full-size mask every epoch
"""
from __future__ import annotations

import io
import os

from ..common import alternated, epochs, machine, rate
from . import OUT, pipeline_args, save

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def build(n: int, size: tuple[int, int] = (500, 375), grey: bool = False) -> tuple[list[str], str]:
    """`n` JPEGs of `size` (width, height; `grey`: of one channel, as FER2013's 48x48 faces)
    cut from scikit-image's photographs, as shards and as an ImageFolder tree."""
    import numpy as np
    from PIL import Image
    from skimage import data

    from gpudecode.io.writer import ShardWriter

    root = OUT / (f"loader_{n}" if (size, grey) == ((500, 375), False) else
                  f"loader_{n}_{size[0]}x{size[1]}{'_grey' if grey else ''}")
    folder = root / "folder"
    shards = sorted(str(p) for p in root.glob("train-*.tar"))
    if shards and folder.exists():
        return shards, str(folder)
    base = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket(), data.immunohistochemistry()]
    rng = np.random.default_rng(0)
    with ShardWriter(str(root / "train-%06d.tar"), maxcount=256) as w:
        for k in range(n):
            img = base[k % len(base)]
            h, wd = img.shape[:2]
            t, l = int(rng.integers(0, h // 4)), int(rng.integers(0, wd // 4))
            im = Image.fromarray(img[t:, l:]).resize(size, Image.Resampling.BILINEAR)
            im = im.convert("L") if grey else im
            b = io.BytesIO()
            im.save(b, format="JPEG", quality=90)
            cls = k % len(base)
            w.write({"__key__": f"{k:07d}", "jpg": b.getvalue(), "cls": str(cls)})
            d = folder / f"c{cls}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{k:07d}.jpg").write_bytes(b.getvalue())
    return w.shards, str(folder)


def run_gpudecode(shards, threads, batch, split="auto"):
    from gpudecode import Loader
    from gpudecode import transforms as T

    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4, 0.1),
                    T.Normalize(MEAN, STD)])
    ld = Loader(shards, batch_size=batch, transform=tf, device="cpu", num_threads=threads, split=split)
    return epochs(ld), ld


class OwnDataset:
    """A script's own Dataset over the folder's files (PIL opens each image in __getitem__,
    a `transform` attribute), in two kinds: `listed`, its files' paths in one list and
    their labels in another (the Loader reads the files itself: own_sets.path_set);
    else its records in a dict by index (no column the Loader reads: it goes through
    __getitem__)."""

    def __init__(self, folder, transform=None, listed=False):
        items = sorted((os.path.join(folder, c, f), int(c[1:])) for c in os.listdir(folder)
                       for f in os.listdir(os.path.join(folder, c)))
        self.transform = transform
        if listed:
            self.paths, self.labels = [p for p, _ in items], [y for _, y in items]
        else:
            self.records = dict(enumerate(items))

    def __len__(self):
        return len(self.paths) if hasattr(self, "paths") else len(self.records)

    def __getitem__(self, i):
        from PIL import Image

        path, y = (self.paths[i], self.labels[i]) if hasattr(self, "paths") else self.records[i]
        with Image.open(path) as im:
            img = im.convert("RGB")
        return (self.transform(img) if self.transform else img), y


def run_dataset(ds, threads, batch):
    """The Loader given a torch Dataset object (ImageFolder: read from its files; a
    script's own: through its __getitem__), with the set's torchvision transform."""
    from gpudecode import Loader

    return epochs(Loader(ds, batch_size=batch, device="cpu", num_threads=threads))


def _tv_transform(jitter):
    import torchvision.transforms as v1

    return v1.Compose([v1.RandomResizedCrop(224), v1.RandomHorizontalFlip()]
                      + ([v1.ColorJitter(0.4, 0.4, 0.4, 0.1)] if jitter else []) + [v1.ToTensor(), v1.Normalize(MEAN, STD)])


def run_torchvision(folder, threads, batch, jitter):
    import torch
    from torchvision.datasets import ImageFolder

    ds = ImageFolder(folder, transform=_tv_transform(jitter))
    dl = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True, num_workers=threads,
                                     persistent_workers=True, prefetch_factor=2)

    def go():
        return sum(x.shape[0] for x, _ in dl)
    return go


def run_dali(folder, threads, batch):
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=folder, random_shuffle=True, name="reader")
        img = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                            random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
        img = fn.resize(img, resize_x=224, resize_y=224, antialias=True)
        img = fn.brightness_contrast(img, brightness=fn.random.uniform(range=[0.6, 1.4]),
                                     contrast=fn.random.uniform(range=[0.6, 1.4]))
        img = fn.hsv(img, hue=fn.random.uniform(range=[-36.0, 36.0]), saturation=fn.random.uniform(range=[0.6, 1.4]))
        img = fn.crop_mirror_normalize(img, dtype=types.FLOAT, output_layout="CHW", mirror=fn.random.coin_flip(),
                                       mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD])
        return img, labels

    return dali_epochs(pipe)


def dali_epochs(pipe):
    """A callable running one epoch of the DALI pipeline `pipe` (a pipeline_def function
    whose reader is named "reader"), built here, returning the images it gave."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (DALI's own auto_aug uses deprecated aliases)
        p = pipe()
        p.build()
    size = p.epoch_size("reader")

    def go():
        n = 0
        while n < size:
            (imgs, _) = p.run()
            n += len(imgs)
        return n
    return go


timed = rate  # (the median rate after a warm-up run: gpudecode.bench.common.rate)


def splits(shards, a) -> None:
    """The Loader's rate (the JPEG pipeline above, shuffled) with each split, epochs
    alternated in one run (issue 40: the elastic order's cost against whole shards)."""
    names = ("shard", "sample", "elastic")
    # (one warm-up each: the kernel, the counts, the page cache)
    med = alternated({k: run_gpudecode(shards, a.threads, a.batch, split=k)[0] for k in names}, a.repeat * 2)
    print(f"{a.images} JPEGs 500x375 q90, batch {a.batch}, {a.threads} threads, shuffled; {len(shards)} shards")
    for k in names:
        print(f"split={k:8s} {med[k]:8.0f} img/s  {med[k] / med['shard']:.2f}x whole shards")
    remote = remote_splits(shards, a, names) if a.remote else {}
    save("loader_splits", {"machine": machine(), "args": vars(a), "img_per_s": med, "remote": remote})


def remote_splits(shards, a, names) -> dict:
    """The same over HTTP (a local server) with a node cache (cache_dir): each split's
    first epoch (the shards fetched into the cache) and second (read from it)."""
    import functools
    import http.server
    import tempfile
    import threading
    import time

    folder = os.path.dirname(shards[0])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=folder)
    handler.log_message = lambda *args, **kw: None  # type: ignore[attr-defined]
    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):  # a reader that closes early: not the bench's error
            import sys

            if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    urls = [f"http://127.0.0.1:{server.server_port}/{os.path.basename(u)}" for u in shards]
    out: dict = {}
    try:
        for k in names:
            with tempfile.TemporaryDirectory() as cache:
                from gpudecode import Loader
                from gpudecode import transforms as T

                tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(),
                                T.ColorJitter(0.4, 0.4, 0.4, 0.1), T.Normalize(MEAN, STD)])
                ld = Loader(urls, batch_size=a.batch, transform=tf, device="cpu", num_threads=a.threads, split=k,
                            cache_dir=cache)
                rates = []
                for epoch in range(2):
                    ld.set_epoch(epoch)
                    t = time.perf_counter()
                    n = sum(b.images.shape[0] for b in ld)
                    rates.append(n / (time.perf_counter() - t))
                ld.close()
            out[k] = {"first_epoch_img_s": rates[0], "cached_epoch_img_s": rates[1]}
            print(f"over HTTP with cache_dir, split={k:8s}: first epoch {rates[0]:7.0f} img/s, then "
                  f"{rates[1]:7.0f} img/s")
    finally:
        server.shutdown()
    return out


CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]


def captioned(shards: list[str]) -> list[str]:
    """The bench's shards again with a caption (.txt, 32-90 characters of UTF-8) beside
    each image, as LAION's and CC12M's shards hold them."""
    words = ["a", "photo", "of", "the", "astronaut", "coffee", "cat", "rocket", "cells", "on", "table", "café",
             "under", "light", "blue", "sky"]

    def caption(key: str, jpeg: bytes) -> dict:
        k = int(key)
        return {"txt": " ".join(words[(k * 7 + j * 3) % len(words)] for j in range(8 + k % 10))}
    return _with_members(shards, "captioned", caption)


def _with_members(shards: list[str], name: str, make) -> list[str]:
    """The bench's shards written again under OUT (once: kept for later runs) as
    <their folder>_<name>, each JPEG with the members make(key, its bytes) gives beside it."""
    import tarfile

    from gpudecode.io.writer import ShardWriter

    root = OUT / f"{os.path.basename(os.path.dirname(shards[0]))}_{name}"
    done = sorted(str(p) for p in root.glob("train-*.tar"))
    if done:
        return done
    with ShardWriter(str(root / "train-%06d.tar"), maxcount=256) as w:
        for u in shards:
            with tarfile.open(u) as t:
                for m in t.getmembers():
                    if m.name.endswith(".jpg"):
                        data = t.extractfile(m).read()  # type: ignore[union-attr]
                        w.write({"__key__": m.name[:-4], "jpg": data, **make(m.name[:-4], data)})
    return w.shards


def tokens(text: str):
    """A stand-in tokenizer: the first 77 characters' code points as an int64 [77] tensor,
    zero-padded (a CLIP tokenizer's output shape)."""
    import torch

    ids = [ord(c) for c in text[:77]]
    return torch.tensor(ids + [0] * (77 - len(ids)), dtype=torch.int64)


def tokenizer(name: str):
    """(the function each caption goes through, its list form, what it is): OpenCLIP's
    own tokenizer for ViT-B-32 (its SimpleTokenizer: `tokenizer(text)[0]` as OpenCLIP's
    data.py calls it, `tokenizer(texts)` on a list) for "openclip", else the stand-in
    (`tokens`)."""
    import torch

    if name == "openclip":
        try:
            import open_clip
        except ImportError as e:
            raise SystemExit(f"--tokenizer openclip needs OpenCLIP ({e}): pip install open_clip_torch") from e

        tok = open_clip.get_tokenizer("ViT-B-32")

        def one(text: str):
            return tok(text)[0]
        return one, tok, f"OpenCLIP {open_clip.__version__} SimpleTokenizer"

    def many(texts: list):
        return torch.stack([tokens(t) for t in texts])
    return tokens, many, "a stand-in (77 code points)"


def captions(shards, a) -> None:
    """Image-text pairs as CLIP-style training reads them: OpenCLIP's train transform
    (RandomResizedCrop(224, scale=(0.9, 1.0), bicubic) + Normalize with CLIP's mean and
    std), each caption tokenized on the workers (--tokenizer). The Loader
    (fields={"txt": tok}, labels=False; and with the tokenizer's list form once a batch,
    fields.batched) against webdataset's pipeline as OpenCLIP's data.py builds it
    (decode("pilrgb"), rename, map_dict, to_tuple, batched, in a WebLoader with --threads
    workers), and the Loader without the captions (what the field costs)."""
    import torch
    import torchvision.transforms as v1
    import webdataset as wds

    from gpudecode import Loader
    from gpudecode import transforms as T
    from gpudecode.fields import batched

    urls = captioned(shards)
    tok, tok_list, tok_name = tokenizer(a.tokenizer)
    ours = T.Compose([T.RandomResizedCrop(224, scale=(0.9, 1.0), interpolation="bicubic"),
                      T.Normalize(CLIP_MEAN, CLIP_STD)])

    def loader(fields):
        return epochs(Loader(urls, batch_size=a.batch, transform=ours, device="cpu", num_threads=a.threads,
                             labels=False, fields=fields))

    preprocess = v1.Compose([v1.RandomResizedCrop(224, scale=(0.9, 1.0), interpolation=v1.InterpolationMode.BICUBIC),
                             v1.ToTensor(), v1.Normalize(CLIP_MEAN, CLIP_STD)])

    def web():
        pipe = (wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False).shuffle(1000).decode("pilrgb")
                .rename(image="jpg;png;jpeg;webp", text="txt").map_dict(image=preprocess, text=tok)
                .to_tuple("image", "text").batched(a.batch, partial=True))
        dl = wds.WebLoader(pipe, batch_size=None, shuffle=False, num_workers=a.threads, persistent_workers=True)

        def go():
            return sum(x.shape[0] for x, _ in dl)
        return go

    rows = alternated({"gpudecode Loader, captions tokenized": loader({"txt": tok}),
                       "gpudecode Loader, tokenized a batch at a time": loader({"txt": batched(tok_list)}),
                       "gpudecode Loader, images alone": loader(None),
                       "webdataset + DataLoader (OpenCLIP's)": web()}, a.repeat)
    print(f"{a.images} image-text pairs (JPEG 500x375 q90 + .txt) -> 224x224 float + [77] tokens, batch {a.batch}, "
          f"{a.threads} threads/workers, {os.cpu_count()} cores, torch {torch.__version__}, webdataset "
          f"{getattr(wds, '__version__', '?')}; tokenizer: {tok_name}")
    _ratios(rows, "webdataset + DataLoader (OpenCLIP's)", "pipeline", "x webdataset")
    save("loader_captions", {"machine": machine(), "args": vars(a), "tokenizer": tok_name, "img_per_s": rows})


def masked(shards: list[str]) -> list[str]:
    """The bench's shards again with a segmentation mask (.seg.png, a palette PNG) beside
    each image: the photograph's grey levels, smoothed over 9x9 pixels, in 8 classes
    (regions with real photographs' boundaries; as VOC and ADE20K keep their masks)."""
    import numpy as np
    from PIL import Image, ImageFilter

    palette = [v for i in range(256) for v in ((i * 37) % 256, (i * 91) % 256, (i * 13) % 256)]

    def mask(key: str, jpeg: bytes) -> dict:
        with Image.open(io.BytesIO(jpeg)) as im:
            grey = np.asarray(im.convert("L").filter(ImageFilter.BoxBlur(4)))
        seg = Image.fromarray((grey // 32).astype(np.uint8))
        seg.putpalette(palette)
        b = io.BytesIO()
        seg.save(b, "PNG")
        return {"seg.png": b.getvalue()}
    return _with_members(shards, "masked", mask)


def masks(shards, a) -> None:
    """Segmentation as torchvision's reference trains it (references/segmentation/presets.py
    at its defaults: base 520, crop 480): RandomResize(260, 1040), RandomCrop(480,
    pad_if_needed; the mask padded with 255), flip, Normalize, the mask as int64. The
    Loader (fields={"seg.png": Mask(fill=255, dtype=torch.int64)}, labels=False) against
    torchvision.transforms.v2 moving the image and its tv_tensors.Mask together over
    webdataset in a WebLoader with --threads workers; the Loader with the masks as they are
    decoded (uint8: what int64 costs on the host; on a GPU the conversion is the device's),
    and without them (what they cost)."""
    import numpy as np
    import torch
    import torchvision.transforms.v2 as v2
    import webdataset as wds
    from torchvision import tv_tensors

    from gpudecode import Loader, Mask
    from gpudecode import transforms as T

    urls = masked(shards)
    ours = T.Compose([T.RandomResize(260, 1040), T.RandomCrop(480, pad_if_needed=True), T.RandomHorizontalFlip(),
                      *_rotation(T, a), T.Normalize(MEAN, STD)])

    def loader(fields):
        return epochs(Loader(urls, batch_size=a.batch, transform=ours, device="cpu", num_threads=a.threads,
                             labels=False, fields=fields))

    reference = v2.Compose([v2.RandomResize(260, 1040), v2.RandomHorizontalFlip(),
                            v2.RandomCrop(480, pad_if_needed=True, fill={tv_tensors.Image: 0, tv_tensors.Mask: 255}),
                            *_rotation(v2, a, fill={tv_tensors.Image: 0, tv_tensors.Mask: 255}),
                            v2.ToDtype({tv_tensors.Image: torch.float32, tv_tensors.Mask: torch.int64, "others": None},
                                       scale=True),
                            v2.Normalize(MEAN, STD)])

    def read_mask(data: bytes):  # (webdataset's "pil" makes every PNG RGB: a mask's indices read as Pillow reads them)
        from PIL import Image

        with Image.open(io.BytesIO(data)) as im:
            return np.array(im)

    def sample(image, mask):
        img = tv_tensors.Image(v2.functional.pil_to_tensor(image))
        return reference(img, tv_tensors.Mask(torch.from_numpy(mask)))

    web = (wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False).shuffle(1000)
           .decode(wds.handle_extension("seg.png", read_mask), "pil")
           .to_tuple("jpg", "seg.png").map(lambda x: sample(*x)).batched(a.batch, partial=True))
    rows = alternated({"gpudecode Loader, Mask field": loader({"seg.png": Mask(fill=255, dtype=torch.int64)}),
                       "gpudecode Loader, Mask field as uint8": loader({"seg.png": Mask(fill=255)}),
                       "gpudecode Loader, images alone": loader(None),
                       "torchvision v2 reference + webdataset": _web_epochs(web, a.threads)}, a.repeat)
    _against_torchvision(rows, f"{a.images} JPEGs 500x375 q90 + palette-PNG masks -> 480x480 float + int64 masks"
                         + _rotated(a), "loader_masks" + ("_rotate" if a.rotate else ""), a)


def _rotation(ns, a, **kw) -> list:
    """[RandomRotation(--rotate)] of `ns` (gpudecode.transforms or torchvision's v2), or none."""
    return [ns.RandomRotation(a.rotate, **kw)] if a.rotate else []


def _rotated(a) -> str:
    return f", RandomRotation({a.rotate:g}) after the flip" if a.rotate else ""


def precached_masks(shards, a) -> None:
    """Segmentation from tensor shards: the masked set precached at --precache S (shorter
    side), once with its masks moved there by precache (masks=["seg.png"]) and once
    without (the Loader decoding each full-size mask and moving it onto the stored image
    every epoch, by its record); the Loader over each with RandomResizedCrop(224) + flip +
    Normalize and an int64 Mask field, and over the images alone."""
    import torch

    from gpudecode import Loader, Mask
    from gpudecode import transforms as T
    from gpudecode.precache import precache

    urls = masked(shards)
    root = OUT / f"{os.path.basename(os.path.dirname(urls[0]))}_precached_{a.precache}"
    sets = {moved: precache(urls, str(root / ("moved" if moved else "each-epoch")), size=a.precache, resume=True,
                            masks=["seg.png"] if moved else (), num_threads=a.threads).shards
            for moved in (True, False)}  # (kept for later runs: a second run resumes, decoding none)
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.Normalize(MEAN, STD)])

    def loader(shards, fields):
        return epochs(Loader(shards, batch_size=a.batch, transform=tf, device="cpu", num_threads=a.threads,
                             labels=False, fields=fields))

    mask = {"seg.png": Mask(fill=255, dtype=torch.int64)}
    rows = alternated({"masks moved by precache (--mask)": loader(sets[True], mask),
                       "masks moved by the Loader each epoch": loader(sets[False], mask),
                       "images alone": loader(sets[True], None)}, a.repeat)
    print(f"{a.images} JPEGs 500x375 + palette-PNG masks precached at {a.precache} -> RandomResizedCrop(224) + flip "
          f"+ Normalize, int64 masks, batch {a.batch}, {a.threads} threads, {os.cpu_count()} cores, "
          f"torch {torch.__version__}")
    _ratios(rows, "masks moved by the Loader each epoch", "tensor shards", "x each epoch")
    save("loader_masks_precached", {"machine": machine(), "args": vars(a), "img_per_s": rows})


def _web_epochs(pipe, threads: int):
    """go(): one epoch of the webdataset pipeline `pipe` (batches of (images, targets)) in a
    WebLoader with `threads` workers, its image count."""
    import webdataset as wds

    dl = wds.WebLoader(pipe, batch_size=None, shuffle=False, num_workers=threads, persistent_workers=True)

    def go():
        return sum(len(x) for x, _ in dl)  # (a list where each image has its own size)
    return go


def _against_torchvision(rows: dict, what: str, name: str, a) -> None:
    """The rows' rates and their ratios to torchvision's, printed and saved as `name`."""
    import torch

    print(f"{what}, batch {a.batch}, {a.threads} threads/workers, {os.cpu_count()} cores, torch {torch.__version__}")
    _ratios(rows, "torchvision v2 reference + webdataset", "pipeline", "x torchvision")
    save(name, {"machine": machine(), "args": vars(a), "img_per_s": rows})


def _ratios(rows: dict, ref: str, first: str, against: str) -> None:
    """The rows' rates and each one's ratio to row `ref`'s, as a table (columns `first`,
    img/s, `against`)."""
    width = max(40, *map(len, rows))
    print(f"{first:{width}s} {'img/s':>8s} {against:>14s}")
    for row, r in rows.items():
        print(f"{row:{width}s} {r:8.0f} {r / rows[ref]:14.2f}")


def boxed(shards: list[str]) -> list[str]:
    """The bench's shards again with COCO annotations (.json: a list of {"bbox": [x, y, w,
    h], "category_id", "iscrowd"}) beside each image: 1-14 boxes of 8-60% of each side
    (COCO has 7.3 an image), some reaching the border, seeded by the image's key."""
    import json
    import zlib

    import numpy as np

    def annotations(key: str, jpeg: bytes) -> dict:
        rng = np.random.default_rng(zlib.crc32(key.encode()))
        n = int(rng.integers(1, 15))
        wh = rng.uniform(0.08, 0.6, (n, 2)) * (500, 375)
        xy = rng.uniform(0, 1, (n, 2)) * ((500, 375) - wh)
        anns = [{"bbox": [round(float(v), 2) for v in (*p, *s)], "category_id": int(c), "iscrowd": 0}
                for p, s, c in zip(xy, wh, rng.integers(1, 91, n))]
        return {"json": json.dumps(anns).encode()}
    return _with_members(shards, "boxed", annotations)


def boxes(shards, a) -> None:
    """Detection with the large-scale-jitter recipe of torchvision's detection reference
    (references/detection/presets.py, "lsj"), at 640 in place of its 1024 (a batch of
    1024x1024 float images is 200 MB a 16 here): ScaleJitter((640, 640)), a 640 crop padded
    where the image is smaller, flip, the image to float, the boxes to XYXY and sanitized.
    The Loader (fields={"json": Boxes("XYWH", out_format="XYXY")}, labels=False) against
    torchvision.transforms.v2 moving the image and its tv_tensors.BoundingBoxes together
    (then SanitizeBoundingBoxes) over webdataset in a WebLoader with --threads workers; the
    Loader without the boxes (what they cost). With --recipe ssd, SSD's (the reference's
    "ssd" preset at 300 with a Resize so that a batch has one size; its photometric
    distortion after the flip in both pipelines, where the kernel runs it), where the
    crop is drawn from the boxes (RandomIoUCrop), so the Loader reads them in either case.
    With --recipe ssdlite, the "ssdlite" preset as written: RandomIoUCrop and the flip, each
    image at its own size (Compose(ragged=True): a RaggedBatch; torchvision's batch a list);
    with --recipe multiscale, the "multiscale" preset as written: RandomShortestSize(480 to
    800 by 32, max_size=1333) and the flip, each image at its own size."""
    import torch
    import torchvision.transforms.v2 as v2
    import webdataset as wds
    from torchvision import tv_tensors

    from gpudecode import Boxes, Loader
    from gpudecode import transforms as T

    urls = boxed(shards)
    size = 640 if a.recipe == "lsj" else 300
    ragged = a.recipe in ("ssdlite", "multiscale")

    def recipe(ns):  # (SSD's distortion after the flip in both: the kernel runs it there)
        if a.recipe == "multiscale":
            return [ns.RandomShortestSize(list(range(480, 801, 32)), max_size=1333), ns.RandomHorizontalFlip(),
                    *_rotation(ns, a)]
        if ragged:
            return [ns.RandomIoUCrop(), ns.RandomHorizontalFlip(), *_rotation(ns, a)]
        if a.recipe == "ssd":
            return [ns.RandomZoomOut(fill=[123, 117, 104]), ns.RandomIoUCrop(), ns.Resize((size, size)),
                    ns.RandomHorizontalFlip(), ns.RandomPhotometricDistort(), *_rotation(ns, a)]
        return [ns.ScaleJitter((size, size)), ns.RandomCrop(size, pad_if_needed=True), ns.RandomHorizontalFlip(),
                *_rotation(ns, a)]

    ours = T.Compose([*recipe(T), T.ToDtype(torch.float32, scale=True)], ragged=ragged)

    def loader(fields):
        return epochs(Loader(urls, batch_size=a.batch, transform=ours, device="cpu", num_threads=a.threads,
                             labels=False, fields=fields))

    reference = v2.Compose([*recipe(v2), v2.ToDtype(torch.float32, scale=True), v2.ConvertBoundingBoxFormat("XYXY"),
                            v2.SanitizeBoundingBoxes()])

    def sample(image, anns):
        img = tv_tensors.Image(v2.functional.pil_to_tensor(image))
        box = tv_tensors.BoundingBoxes([x["bbox"] for x in anns], format="XYWH", canvas_size=img.shape[-2:])
        return reference(img, {"boxes": box, "labels": torch.tensor([x["category_id"] for x in anns])})

    def collate(samples):  # (ssdlite's images of their own sizes: a list, as the reference's collate keeps them)
        images = [x for x, _ in samples]
        return images if ragged else torch.stack(images), [t for _, t in samples]

    web = (wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False).shuffle(1000).decode("pil")
           .to_tuple("jpg", "json").map(lambda x: sample(*x)).batched(a.batch, partial=True, collation_fn=collate))
    ours_rows = {"gpudecode Loader, Boxes field": loader({"json": Boxes("XYWH", out_format="XYXY")})}
    if a.recipe == "lsj":  # (SSD's crop is drawn from the boxes: no Loader without them)
        ours_rows["gpudecode Loader, images alone"] = loader(None)
    rows = alternated({**ours_rows, "torchvision v2 reference + webdataset": _web_epochs(web, a.threads)}, a.repeat)
    shape = "images of their own sizes" if ragged else f"{size}x{size}"
    _against_torchvision(rows, f"{a.images} JPEGs 500x375 q90 + COCO annotations (1-14 boxes), {a.recipe} -> "
                         f"{shape} float + boxes" + _rotated(a),
                         "loader_boxes" + ("" if a.recipe == "lsj" else f"_{a.recipe}") + ("_rotate" if a.rotate else ""),
                         a)


def main() -> None:
    ap = pipeline_args(__doc__, images=2048)
    ap.add_argument("--skip-dali", action="store_true")
    ap.add_argument("--splits", action="store_true", help="the Loader with each split (shard, sample, elastic)")
    ap.add_argument("--remote", action="store_true", help="with --splits: also over HTTP with a node cache")
    ap.add_argument("--captions", action="store_true", help="image-text pairs: fields='txt' against webdataset")
    ap.add_argument("--tokenizer", choices=("openclip", "standin"), default="standin",
                    help="with --captions: OpenCLIP's own (pip install open_clip_torch) or a stand-in")
    ap.add_argument("--masks", action="store_true", help="segmentation: a Mask field against torchvision v2's reference")
    ap.add_argument("--boxes", action="store_true", help="detection: a Boxes field against torchvision v2's LSJ recipe")
    ap.add_argument("--recipe", choices=("lsj", "ssd", "ssdlite", "multiscale"), default="lsj",
                    help="with --boxes: large-scale jitter at 640, SSD's (zoom out, IoU crop) at 300, or ssdlite's "
                         "or multiscale's as written (images of their own sizes)")
    ap.add_argument("--precache", type=int, default=0, metavar="S",
                    help="with --masks: from tensor shards precached at S, masks moved by precache or each epoch")
    ap.add_argument("--rotate", type=float, default=0.0,
                    help="with --masks or --boxes: RandomRotation(DEG) after the flip in both pipelines")
    a = ap.parse_args()
    shards, folder = build(a.images)
    if a.splits:
        splits(shards, a)
        return
    if a.captions:
        captions(shards, a)
        return
    if a.masks:
        (precached_masks if a.precache else masks)(shards, a)
        return
    if a.boxes:
        boxes(shards, a)
        return
    rows = {}
    go, ld = run_gpudecode(shards, a.threads, a.batch)
    rows["gpudecode Loader (CPU), ColorJitter"] = timed(go, a.repeat)
    stats = str(ld.stats)
    from torchvision.datasets import ImageFolder

    rows["gpudecode Loader(ImageFolder object)"] = timed(
        run_dataset(ImageFolder(folder, transform=_tv_transform(True)), a.threads, a.batch), a.repeat)
    rows["gpudecode Loader(own Dataset, paths listed)"] = timed(
        run_dataset(OwnDataset(folder, transform=_tv_transform(True), listed=True), a.threads, a.batch), a.repeat)
    rows["gpudecode Loader(own Dataset), __getitem__"] = timed(
        run_dataset(OwnDataset(folder, transform=_tv_transform(True)), a.threads, a.batch), a.repeat)
    rows["torchvision classic DataLoader, ColorJitter"] = timed(run_torchvision(folder, a.threads, a.batch, True), a.repeat)
    rows["torchvision classic DataLoader, no jitter"] = timed(run_torchvision(folder, a.threads, a.batch, False), a.repeat)
    if not a.skip_dali:
        rows["DALI CPU pipeline, ColorJitter-like"] = timed(run_dali(folder, a.threads, a.batch), a.repeat)
    ours = rows["gpudecode Loader (CPU), ColorJitter"]
    print(f"{a.images} JPEGs 500x375 q90 -> 224x224 float, batch {a.batch}, {a.threads} threads/workers, "
          f"{os.cpu_count()} cores")
    print(f"{'pipeline':46s} {'img/s':>8s} {'gpudecode x':>12s} {'x classic':>10s}")
    classic = rows["torchvision classic DataLoader, ColorJitter"]
    for name, r in rows.items():
        print(f"{name:46s} {r:8.0f} {ours / r:12.2f} {r / classic:10.2f}")
    print("gpudecode stages (last epoch):", stats)
    save("loader", {"machine": machine(), "args": vars(a), "img_per_s": rows, "gpudecode_stats": stats})


if __name__ == "__main__":
    main()
