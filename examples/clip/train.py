"""Image-text pairs from WebDataset shards (LAION's, CC12M's layout: `<key>.jpg` beside
`<key>.txt`), trained on contrastively as CLIP is: each caption tokenized on the Loader's
threads (`fields={"txt": tokenize}`), batches of (images, tokens).

    python examples/clip/train.py --data "cc12m/{00000..01242}.tar" --epochs 1
    python examples/clip/train.py --make-demo DIR     # write small captioned shards (offline), then train

The transform is OpenCLIP's for training as open_clip writes it (torchvision's
RandomResizedCrop(scale=(0.9, 1.0), bicubic), its `_convert_to_rgb` function, ToTensor,
Normalize with CLIP's mean and std), given to the Loader as it is: the function that
returns `image.convert("RGB")` is taken for torchvision's RGB step. The tokenizer here is a stand-in (UTF-8 bytes, 77
of them): pass open_clip's (`open_clip.get_tokenizer(name)`, whose call gives [1, 77]) in
its place. A sample whose caption is missing or not UTF-8 is skipped and named
(`on_error="skip"`, `loader.skipped`), the rest of its batch kept.
"""
from __future__ import annotations

import argparse
import io
import os
import time

import torch
import torch.nn as nn
import torchvision.transforms as v1

import gpudecode

CLIP_MEAN, CLIP_STD = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
CONTEXT = 77


def _convert_to_rgb(image):
    """open_clip's (open_clip/transform.py), as its transforms hold it."""
    return image.convert("RGB")


def tokenize(text: str) -> torch.Tensor:
    """A caption as CONTEXT int64 token ids (its UTF-8 bytes + 1, 0 pads): a stand-in with
    a real tokenizer's output shape."""
    ids = [b + 1 for b in text.encode("utf-8")[:CONTEXT]]
    return torch.tensor(ids + [0] * (CONTEXT - len(ids)), dtype=torch.int64)


def make_demo(out: str, per_photo: int = 16) -> list[str]:
    """Crops of scikit-image's photographs, each with a caption that names what it shows,
    written as two tar shards (jpg + txt a sample)."""
    import numpy as np
    from PIL import Image
    from skimage import data

    from gpudecode.io.writer import ShardWriter

    photos = {"an astronaut": data.astronaut(), "a cup of coffee": data.coffee(), "a cat": data.chelsea(),
              "a rocket": data.rocket()}
    styles = ["a photo of {}", "{} in close-up", "a picture showing {}", "{}, cropped"]
    rng = np.random.default_rng(0)
    os.makedirs(out, exist_ok=True)
    with ShardWriter(os.path.join(out, "pairs-%06d.tar"), maxcount=per_photo * len(photos) // 2) as w:
        for k in range(per_photo):
            for what, img in photos.items():
                h, wd = img.shape[:2]
                t, l = int(rng.integers(0, h // 3)), int(rng.integers(0, wd // 3))
                b = io.BytesIO()
                Image.fromarray(img[t:t + h // 2, l:l + wd // 2]).save(b, "JPEG", quality=90)
                w.write({"__key__": f"{what.split()[-1]}-{k:04d}", "jpg": b.getvalue(),
                         "txt": styles[k % len(styles)].format(what)})
    return w.shards


class TinyClip(nn.Module):
    """An image tower (two convolutions) and a text tower (a token embedding, averaged),
    each projected to `dim`, and CLIP's learned temperature."""

    def __init__(self, dim: int = 32) -> None:
        super().__init__()
        self.image = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                                   nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                                   nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, dim))
        self.text = nn.EmbeddingBag(257, dim, mode="mean", padding_idx=0)
        self.scale = nn.Parameter(torch.tensor(2.659))  # log(1 / 0.07), CLIP's start

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        a = nn.functional.normalize(self.image(images), dim=-1)
        b = nn.functional.normalize(self.text(tokens), dim=-1)
        return self.scale.exp() * a @ b.t()  # [N, N]: image i against caption j


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=None, help="tar shards: a brace pattern, a glob, a directory, URLs")
    ap.add_argument("--make-demo", default=None, metavar="DIR", help="write small captioned shards into DIR, train")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    data = make_demo(args.make_demo) if args.make_demo else args.data
    if data is None:
        ap.error("give --data or --make-demo")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    train = v1.Compose([v1.RandomResizedCrop(args.image_size, scale=(0.9, 1.0),
                                             interpolation=v1.InterpolationMode.BICUBIC),
                        _convert_to_rgb, v1.ToTensor(), v1.Normalize(CLIP_MEAN, CLIP_STD)])
    loader = gpudecode.Loader(data, batch_size=args.batch_size, transform=train, device=device, labels=False,
                              fields={"txt": tokenize}, num_threads=args.threads, shuffle=True, seed=0,
                              on_error="skip", drop_last=True)
    print(f"{loader.total_samples} image-text pairs, {len(loader)} batches an epoch on {device}; "
          f"a batch is {loader.describe()['batch']}")
    model = TinyClip().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    with loader:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            t, seen, total, right = time.perf_counter(), 0, 0.0, 0
            for images, tokens in loader:
                logits = model(images, tokens)
                target = torch.arange(len(logits), device=device)
                loss = (nn.functional.cross_entropy(logits, target) + nn.functional.cross_entropy(logits.t(), target)) / 2
                opt.zero_grad()
                loss.backward()
                opt.step()
                seen += len(target)
                total += loss.item() * len(target)
                right += int((logits.argmax(1) == target).sum())
            print(f"epoch {epoch}: {seen} pairs, loss {total / max(seen, 1):.3f}, image->caption top-1 "
                  f"{right / max(seen, 1):.2f}, {seen / (time.perf_counter() - t):,.0f} pairs/s")
    if loader.skipped:
        print(f"skipped {len(loader.skipped)}: {loader.skipped[0].key}: {loader.skipped[0].reason}")


if __name__ == "__main__":
    main()
