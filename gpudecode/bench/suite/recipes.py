"""Today's recipes on this machine's cores, gpudecode against the classic DataLoader
running the same recipe with torchvision (and DALI's CPU pipeline where it has the
ops), in one run (ImageNet-like JPEGs, 500x375 q90, the images of bench/loader.py).
Each recipe is written once as a torchvision v2 Compose: the DataLoader runs it on PIL
images, gpudecode runs `Compose.from_torchvision` of it.

- reference: torchvision's ResNet-50 reference recipe: RandomResizedCrop(224), flip,
  TrivialAugmentWide (bilinear), Normalize, RandomErasing(p=0.1), then
  RandomChoice([MixUp(0.2), CutMix(1.0)]) on each batch (gpudecode's batch_transform;
  the DataLoader's collate_fn, as the reference script does). DALI: its CPU pipeline with
  `auto_aug.trivial_augment_wide`, crop, flip and normalize (no erasing, no mixing).
- dino: DINO's multi-crop, 2 global views at 224 and 6 local at 96, each with
  RandomResizedCrop, flip, RandomApply(ColorJitter(0.4, 0.4, 0.2, 0.1), 0.8),
  RandomGrayscale(0.2), GaussianBlur(23, (0.1, 2)) in RandomApply (p 1.0 and 0.1 for the
  global views, 0.5 local), RandomSolarize(128, 0.2) on the second, Normalize; each image
  decoded once for its 8 views (the DataLoader: a dataset transform returning the 8).

- evaluation over ten crops (--crops): Resize(256), TenCrop(224), ToImage, ToDtype,
  Normalize: gpudecode's Loader (a view a crop, each image decoded once; `images` a list
  of 10 batches) against the DataLoader running the same Compose on PIL images (its
  default collate making the same list), img/s of images (each ten crops).

- each step's added cost per image over RRC(224) + flip + Normalize on the same Loader
  (--ops).
- the auto-augment policies alone (--policies): RRC(224), flip, TrivialAugmentWide,
  RandAugment(2, 9) or AutoAugment(ImageNet), Normalize: gpudecode, the DataLoader with
  torchvision, and DALI's CPU pipeline with its auto_aug equivalents.

- recipes as scripts write them (--as-written), each a v1 Compose on PIL images, given
  to the Loader as it is: a course's `[RandomRotation(30), RandomResizedCrop(224),
  RandomHorizontalFlip(), ToTensor(), Normalize]` (the whole image rotated first: a
  canvas a sample, on the CPU picked natively as torch's grid_sample picks it, from the
  part of the image its crop reads; and a script's bilinear one, `RandomRotation(15,
  interpolation=BILINEAR)` then `RandomResizedCrop(224, scale=(0.8, 1.0))`), the flip first
  (`[RandomHorizontalFlip(), RandomResizedCrop(224), ...]`), CLIP's preprocess
  (bicubic Resize(224), CenterCrop, its RGB function, ToTensor, Normalize), a notebook's
  `[ToTensor(), Resize((224, 224)), Normalize]`, `[Resize((224, 224)),
  RandomRotation(15), RandomHorizontalFlip(), ...]` (the flip after the rotation), a
  transfer-learning script's Resize(224) alone and `[Grayscale(3), Resize(256),
  CenterCrop(224), ...]`, ColorJitter first, a tutorial's `[Resize(256),
  RandomResizedCrop(224), ...]` (each image resized first) and `[Resize(256),
  CenterCrop(256), RandomCrop(224), ...]` (a crop of a crop), person re-identification's
  `[Resize((256, 128)), RandomHorizontalFlip(), Pad(10), RandomCrop((256, 128)), ...]` (a
  flip between the Resize and the crop), CIFAR upscaled for an ImageNet model,
  `[RandomCrop(32, padding=4), RandomHorizontalFlip(), Resize(224), ...]` (a Pad's canvas
  a sample, the flip after the Resize), `[RandomApply([RandomCrop(300)], p=0.5),
  RandomHorizontalFlip(), Resize((224, 224)), ...]` (a crop or none, each image its own),
  `[Resize((224, 224)), RandomChoice([RandomHorizontalFlip(), RandomRotation(30),
  ColorJitter(...)]), ...]` (a flip among a choice's options),
  fine-tuning scripts' `[RandomCrop(300), Resize(224), ...]` and `[Resize(255), RandomChoice([RandomResizedCrop(224),
  CenterCrop(224)]), ...]` (each image its option); and two v2 Composes as written: torchvision's v2
  docs' `[ToImage(), ToDtype(torch.uint8, scale=True), RandomResizedCrop(224),
  RandomHorizontalFlip(), ToDtype(torch.float32, scale=True), Normalize]` and a detection
  script's floats of 0 to 255, `[ToImage(), ToDtype(torch.float32), Normalize(levels),
  Resize((224, 224))]`.

- the batch step (--mixing): MixUp(0.2), CutMix(1.0) (gpudecode's, as the Loader runs
  torchvision's) and timm's Mixup (mixup 0.8, cutmix 1.0, label smoothing 0.1, as
  DeiT's and timm's recipes) alone on a float32 batch of 256 at 224 on the CPU with
  torch's default intra-op threads, ms an image; then the Loader's reference recipe with
  and without its batch step, alternated, and the difference an image.

    python bench/recipes.py [--images 1024] [--threads 2] [--repeat 3]
                            [--ops | --policies | --mixing | --crops | --as-written]
                            [--skip-dali]
"""
from __future__ import annotations

import os

from ..common import epochs, machine
from . import pipeline_args, save
from .loader import MEAN, STD, build, dali_epochs, timed

CLASSES = 1000


def reference_recipe():
    """torchvision's classification reference, ClassificationPresetTrain(auto_augment="ta_wide",
    random_erase=0.1), v2 transforms."""
    import torch
    from torchvision.transforms import v2

    return v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(0.5),
                       v2.TrivialAugmentWide(interpolation=v2.InterpolationMode.BILINEAR), v2.PILToTensor(),
                       v2.ToDtype(torch.float, scale=True), v2.Normalize(MEAN, STD), v2.RandomErasing(0.1),
                       v2.ToPureTensor()])


def mix():
    from torchvision.transforms import v2

    return v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=CLASSES), v2.CutMix(alpha=1.0, num_classes=CLASSES)])


def dino_views():
    """DINO's DataAugmentationDINO in torchvision v2 terms (its PIL blur as GaussianBlur)."""
    import torch
    from torchvision.transforms import v2

    flip_and_jitter = v2.Compose([v2.RandomHorizontalFlip(p=0.5),
                                  v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
                                  v2.RandomGrayscale(p=0.2)])
    norm = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])

    def blur(p):
        return v2.RandomApply([v2.GaussianBlur(23, (0.1, 2.0))], p=p)

    global1 = v2.Compose([v2.RandomResizedCrop(224, scale=(0.4, 1.0)), flip_and_jitter, blur(1.0), norm])
    global2 = v2.Compose([v2.RandomResizedCrop(224, scale=(0.4, 1.0)), flip_and_jitter, blur(0.1),
                          v2.RandomSolarize(128, p=0.2), norm])
    local = v2.Compose([v2.RandomResizedCrop(96, scale=(0.05, 0.4)), flip_and_jitter, blur(0.5), norm])
    return [global1, global2] + [local] * 6


def _dataloader(folder, threads, batch, transform, collate=None):
    import torch
    from torchvision.datasets import ImageFolder

    dl = torch.utils.data.DataLoader(ImageFolder(folder, transform=transform), batch_size=batch, shuffle=True,
                                     num_workers=threads, persistent_workers=True, prefetch_factor=2,
                                     **({"collate_fn": collate} if collate else {}))

    def go():
        return sum(y.shape[0] for _, y in dl)
    return go


def gpudecode_reference(shards, threads, batch):
    from gpudecode import Loader
    from gpudecode import transforms as T

    return epochs(Loader(shards, batch_size=batch, transform=T.Compose.from_torchvision(reference_recipe()),
                          device="cpu", num_workers=threads, batch_transform=mix()))


def torchvision_reference(folder, threads, batch):
    from torch.utils.data import default_collate

    m = mix()

    def collate(items):  # as torchvision's reference train.py does
        return m(*default_collate(items))
    return _dataloader(folder, threads, batch, reference_recipe(), collate)


def dali_reference(folder, threads, batch, policy: str = "ta"):
    """DALI's CPU pipeline: random-crop decode, resize to 224, its auto_aug policy ("ta":
    trivial_augment_wide, "ra": rand_augment(n=2, m=9), "aa": auto_augment_image_net),
    flip and normalize. (No RandomErasing or MixUp/CutMix on DALI's CPU side.)"""
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.auto_aug import auto_augment, rand_augment, trivial_augment

    augment = {"ta": lambda x: trivial_augment.trivial_augment_wide(x),
               "ra": lambda x: rand_augment.rand_augment(x, n=2, m=9, shape=(224, 224)),
               "aa": lambda x: auto_augment.auto_augment_image_net(x, shape=(224, 224))}[policy]

    @pipeline_def(batch_size=batch, num_threads=threads, device_id=None,  # type: ignore[call-overload]
                  enable_conditionals=True)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=folder, random_shuffle=True, name="reader")
        img = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB,
                                            random_area=[0.08, 1.0], random_aspect_ratio=[3 / 4, 4 / 3])
        img = fn.resize(img, resize_x=224, resize_y=224, antialias=True)
        img = augment(img)
        img = fn.crop_mirror_normalize(img, dtype=types.FLOAT, output_layout="CHW", mirror=fn.random.coin_flip(),
                                       mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD])
        return img, labels

    return dali_epochs(pipe)


def policy_recipe(policy: str):
    """RRC(224), flip, the policy (torchvision v2, nearest, as DALI's default interpolation
    is not bilinear either), Normalize: the same steps on every side of the policies table."""
    import torch
    from torchvision.transforms import v2

    aug = {"ta": v2.TrivialAugmentWide(), "ra": v2.RandAugment(2, 9), "aa": v2.AutoAugment()}[policy]
    return v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(0.5), aug,
                       v2.PILToTensor(), v2.ToDtype(torch.float, scale=True), v2.Normalize(MEAN, STD)])


def policies(shards, folder, a) -> dict[str, float]:
    """TrivialAugmentWide, RandAugment(2, 9), AutoAugment(ImageNet) after RRC + flip, then
    Normalize: gpudecode's Loader, the DataLoader with torchvision, DALI's CPU auto_aug."""
    from gpudecode import Loader
    from gpudecode import transforms as T

    rows = {}
    for policy, name in (("ta", "TrivialAugmentWide"), ("ra", "RandAugment(2, 9)"), ("aa", "AutoAugment")):
        tf = T.Compose.from_torchvision(policy_recipe(policy))
        rows[f"{name}: gpudecode Loader"] = timed(epochs(Loader(shards, batch_size=a.batch, transform=tf,
                                                                 device="cpu", num_workers=a.threads)), a.repeat)
        rows[f"{name}: torchvision DataLoader"] = timed(_dataloader(folder, a.threads, a.batch,
                                                                    policy_recipe(policy)), a.repeat)
        if not a.skip_dali:
            rows[f"{name}: DALI CPU pipeline"] = timed(dali_reference(folder, a.threads, a.batch, policy), a.repeat)
    return rows


def gpudecode_dino(shards, threads, batch):
    from gpudecode import Loader
    from gpudecode import transforms as T

    views = [T.Compose.from_torchvision(v) for v in dino_views()]
    return epochs(Loader(shards, batch_size=batch, transform=views, device="cpu", num_workers=threads))


def torchvision_dino(folder, threads, batch):
    views = dino_views()

    def crops(img):
        return [tf(img) for tf in views]
    return _dataloader(folder, threads, batch, crops)


def ten_crops():
    import torch
    import torchvision.transforms.v2 as T

    return T.Compose([T.Resize(256), T.TenCrop(224), T.ToImage(), T.ToDtype(torch.float32, scale=True),
                      T.Normalize(MEAN, STD)])


def crops(shards, folder, a) -> dict[str, float]:
    """Evaluation over ten crops, the Loader against the DataLoader (see the module doc)."""
    from gpudecode import Loader

    return {"gpudecode Loader, TenCrop as 10 views": timed(epochs(Loader(
                shards, batch_size=a.batch, transform=ten_crops(), device="cpu", num_workers=a.threads,
                shuffle=False)), a.repeat),
            "torchvision DataLoader, TenCrop": timed(_dataloader(folder, a.threads, a.batch, ten_crops()), a.repeat)}


def _to_rgb(image):
    """CLIP's `_convert_image_to_rgb`, as its preprocess holds it."""
    return image.convert("RGB")


def as_written() -> dict[str, object]:
    """Recipes as scripts write them (see the module doc): v1 Composes, and two v2 ones, on PIL images."""
    import torch
    import torchvision.transforms as v1
    import torchvision.transforms.v2 as v2

    clip = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))
    tail = [v1.ToTensor(), v1.Normalize(MEAN, STD)]
    return {
        "a course's: RandomRotation(30) first, RRC(224), flip": v1.Compose(
            [v1.RandomRotation(30), v1.RandomResizedCrop(224), v1.RandomHorizontalFlip(), *tail]),
        "bilinear rotation first: RandomRotation(15, BILINEAR), RRC(224, scale=(0.8, 1)), flip": v1.Compose(
            [v1.RandomRotation(15, interpolation=v1.InterpolationMode.BILINEAR),
             v1.RandomResizedCrop(224, scale=(0.8, 1.0)), v1.RandomHorizontalFlip(), *tail]),
        "the flip first: flip, RRC(224)": v1.Compose([v1.RandomHorizontalFlip(), v1.RandomResizedCrop(224), *tail]),
        "CLIP's preprocess: bicubic Resize(224), CenterCrop, RGB": v1.Compose(
            [v1.Resize(224, interpolation=v1.InterpolationMode.BICUBIC), v1.CenterCrop(224), _to_rgb, v1.ToTensor(),
             v1.Normalize(*clip)]),
        "a notebook's: ToTensor first, Resize((224, 224))": v1.Compose(
            [v1.ToTensor(), v1.Resize((224, 224)), v1.Normalize(MEAN, STD)]),
        "Resize((224, 224)), RandomRotation(15), then the flip": v1.Compose(
            [v1.Resize((224, 224)), v1.RandomRotation(15), v1.RandomHorizontalFlip(), *tail]),
        "transfer learning: Resize(224) alone": v1.Compose([v1.Resize(224), *tail]),
        "X-rays: Grayscale(3) first, Resize(256), CenterCrop(224)": v1.Compose(
            [v1.Grayscale(3), v1.Resize(256), v1.CenterCrop(224), *tail]),
        "ColorJitter first: ColorJitter(0.4, 0.4, 0.4, 0.1), RRC(224), flip": v1.Compose(
            [v1.ColorJitter(0.4, 0.4, 0.4, 0.1), v1.RandomResizedCrop(224), v1.RandomHorizontalFlip(), *tail]),
        "a tutorial's: Resize(256), RRC(224), flip": v1.Compose(
            [v1.Resize(256), v1.RandomResizedCrop(224), v1.RandomHorizontalFlip(), *tail]),
        "fine-tuning: RandomCrop(300), Resize(224), flip": v1.Compose(
            [v1.RandomCrop(300), v1.Resize(224), v1.RandomHorizontalFlip(), *tail]),
        "a tutorial's: Resize(256), CenterCrop(256), RandomCrop(224), flip": v1.Compose(
            [v1.Resize(256), v1.CenterCrop(256), v1.RandomCrop(224), v1.RandomHorizontalFlip(), *tail]),
        "person re-id: Resize((256, 128)), flip, Pad(10), RandomCrop((256, 128))": v1.Compose(
            [v1.Resize((256, 128)), v1.RandomHorizontalFlip(), v1.Pad(10), v1.RandomCrop((256, 128)), *tail]),
        "CIFAR upscaled: RandomCrop(32, padding=4), flip, Resize(224)": v1.Compose(
            [v1.RandomCrop(32, padding=4), v1.RandomHorizontalFlip(), v1.Resize(224), *tail]),
        "RandomApply([RandomCrop(300)], p=0.5), flip, Resize((224, 224))": v1.Compose(
            [v1.RandomApply([v1.RandomCrop(300)], p=0.5), v1.RandomHorizontalFlip(), v1.Resize((224, 224)), *tail]),
        "Resize((224, 224)), RandomChoice([flip, RandomRotation(30), ColorJitter])": v1.Compose(
            [v1.Resize((224, 224)), v1.RandomChoice([v1.RandomHorizontalFlip(), v1.RandomRotation(30),
                                                     v1.ColorJitter(0.3, 0.2, 0.2, 0.1)]), *tail]),
        "fine-tuning: Resize(255), RandomChoice([RRC(224), CenterCrop(224)]), flip": v1.Compose(
            [v1.Resize(255), v1.RandomChoice([v1.RandomResizedCrop(224), v1.CenterCrop(224)]),
             v1.RandomHorizontalFlip(), *tail]),
        "dihedral: Resize((224, 224)), RandomChoice([flips]), RandomChoice([expanded quarter turns])": v1.Compose(
            [v1.Resize((224, 224)), v1.RandomChoice([v1.RandomHorizontalFlip(), v1.RandomVerticalFlip()]),
             v1.RandomChoice([v1.RandomRotation((a, a), expand=True) for a in (90, 180, 270)]), *tail]),
        "two warps first: RandomPerspective(0.19, p=0.65), RandomAffine(4, ...), Resize((224, 224))": v1.Compose(
            [v1.RandomPerspective(distortion_scale=0.19, p=0.65),
             v1.RandomAffine(degrees=4.0, translate=(0.06, 0.06), scale=(0.9, 1.1), shear=2.5),
             v1.Resize((224, 224), antialias=True), *tail]),
        "emotion recognition's: Grayscale first, RandomApply([rotation]), RandomApply([perspective]), flip, "
        "Resize((48, 48))": v1.Compose(
            [v1.Grayscale(), v1.RandomApply([v1.RandomRotation(45)], p=0.6),
             v1.RandomApply([v1.RandomPerspective(distortion_scale=0.3)], p=0.5), v1.RandomHorizontalFlip(),
             v1.Resize((48, 48)), v1.RandomApply([v1.GaussianBlur(3)], p=0.3), v1.ToTensor(),
             v1.Normalize((0.5,), (0.5,))]),
        "MNIST scripts': ToTensor, Normalize, flip, RandomRotation(10) (no crop)": v1.Compose(
            [*tail, v1.RandomHorizontalFlip(), v1.RandomRotation(10)]),
        "fine-tuning: Resize(256), RandomRotation(15), CenterCrop(224)": v1.Compose(
            [v1.Resize(256), v1.RandomRotation(15), v1.CenterCrop(224), v1.RandomHorizontalFlip(), *tail]),
        "torchvision's v2 docs: ToImage, ToDtype(uint8), RRC(224), flip": v2.Compose(
            [v2.ToImage(), v2.ToDtype(torch.uint8, scale=True), v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(),
             v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]),
        "a detection script's levels: ToDtype(float32), Normalize(levels), Resize((224, 224))": v2.Compose(
            [v2.ToImage(), v2.ToDtype(torch.float32), v2.Normalize([123.675, 116.28, 103.53], [58.395, 57.12, 57.375]),
             v2.Resize((224, 224))]),
    }


def written(shards, folder, a) -> dict[str, float]:
    """Each recipe of as_written(): the Loader given the torchvision Compose as it is, then
    the DataLoader running it."""
    from gpudecode import Loader

    rows = {}
    for name, tf in _picked(as_written(), a).items():
        rows[f"{name}: gpudecode Loader"] = timed(epochs(Loader(shards, batch_size=a.batch, transform=tf,
                                                                 device="cpu", num_workers=a.threads)), a.repeat)
        rows[f"{name}: torchvision DataLoader"] = timed(_dataloader(folder, a.threads, a.batch, tf), a.repeat)
    return rows


def _picked(recipes: dict[str, object], a) -> dict[str, object]:
    """The recipes whose names hold one of --only's strings (all, without it)."""
    return {k: v for k, v in recipes.items() if not a.only or any(s in k for s in a.only)}


def op_costs(shards, threads, batch, repeat) -> dict[str, float]:
    """img/s of the base recipe and of the base with each step added, in one run."""

    from gpudecode import Loader
    from gpudecode import transforms as T

    crop: list = [T.RandomResizedCrop(224), T.RandomHorizontalFlip()]
    norm: list = [T.Normalize(MEAN, STD)]
    batch_mix = mix()
    cases = {
        "RRC + flip + Normalize (base)": dict(transform=T.Compose(crop + norm)),
        "+ ColorJitter(0.4, 0.4, 0.4, 0.1)": dict(transform=T.Compose(crop + [T.ColorJitter(0.4, 0.4, 0.4, 0.1)]
                                                                      + norm)),
        "+ RandomErasing(p=0.1)": dict(transform=T.Compose(crop + norm + [T.RandomErasing(p=0.1)])),
        "+ RandomErasing(p=1, value='random')": dict(transform=T.Compose(crop + norm
                                                                         + [T.RandomErasing(1.0, value="random")])),
        "+ MixUp/CutMix (batch)": dict(transform=T.Compose(crop + norm), batch_transform=batch_mix),
        "+ a second view (2 x 224)": dict(transform=[T.Compose(crop + norm)] * 2),
        "+ RandomGrayscale(p=1)": dict(transform=T.Compose(crop + [T.RandomGrayscale(1.0)] + norm)),
        "+ RandomAutocontrast(p=1)": dict(transform=T.Compose(crop + [T.RandomAutocontrast(1.0)] + norm)),
        "+ RandomEqualize(p=1)": dict(transform=T.Compose(crop + [T.RandomEqualize(1.0)] + norm)),
        "+ RandomAdjustSharpness(2, p=1)": dict(transform=T.Compose(crop + [T.RandomAdjustSharpness(2.0, 1.0)]
                                                                    + norm)),
        "+ GaussianBlur(23, (0.1, 2))": dict(transform=T.Compose(crop + [T.GaussianBlur(23, (0.1, 2.0))] + norm)),
        "+ RandomRotation(15, bilinear)": dict(transform=T.Compose(crop + [T.RandomRotation(15, "bilinear")] + norm)),
        "+ RandomAffine(10, (0.1, 0.1), (0.9, 1.1), 5)": dict(
            transform=T.Compose(crop + [T.RandomAffine(10, (0.1, 0.1), (0.9, 1.1), 5)] + norm)),
        "+ TrivialAugmentWide (bilinear)": dict(transform=T.Compose(crop + [T.TrivialAugmentWide(
            interpolation="bilinear")] + norm)),
        "+ RandAugment(2, 9)": dict(transform=T.Compose(crop + [T.RandAugment(2, 9)] + norm)),
        "+ AutoAugment (ImageNet)": dict(transform=T.Compose(crop + [T.AutoAugment()] + norm)),
    }
    return {name: timed(epochs(Loader(shards, batch_size=batch, device="cpu", num_workers=threads, **kw)), repeat)
            for name, kw in cases.items()}


def mixing(shards, a) -> dict[str, float]:
    """The batch steps alone (ms an image, median of 7 after a warm-up), then the
    reference recipe with and without its batch step (img/s, alternated rounds)."""
    import random
    import statistics
    import time

    import torch

    from gpudecode import Loader
    from gpudecode import transforms as T
    from gpudecode.mixing import MixUp, as_batch_transform, seeded_call

    n = 256
    images = torch.rand(n, 3, 224, 224)
    labels = torch.randint(0, CLASSES, (n,))
    steps: dict[str, object] = {"MixUp(0.2)": MixUp(alpha=0.2, num_classes=CLASSES),
                                "CutMix(1.0)": as_batch_transform(mix()).transforms[1]}  # type: ignore[union-attr]
    try:
        from timm.data import Mixup

        steps["timm Mixup(0.8, cutmix 1.0, smoothing 0.1)"] = Mixup(
            mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=CLASSES)
    except ImportError:
        print("(timm absent: its Mixup not measured)")
    rows: dict[str, float] = {}
    for name, step in steps.items():
        times = []
        for k in range(8):
            x = images.clone()
            t = time.perf_counter()
            if hasattr(step, "make_params"):
                step(x, labels, rng=random.Random(k))  # type: ignore[operator]
            else:
                seeded_call(step, x, labels, (0, 0, 0, k))  # type: ignore[arg-type]
            times.append(time.perf_counter() - t)
        rows[f"{name} alone, ms an image (batch {n}, {torch.get_num_threads()} torch threads)"] = (
            statistics.median(times[1:]) / n * 1e3)
    for name, ms in rows.items():
        print(f"{name}: {ms:.3f}")
    loaders = {
        "reference recipe with MixUp/CutMix": Loader(shards, batch_size=a.batch, device="cpu", num_workers=a.threads,
                                                     transform=T.Compose.from_torchvision(reference_recipe()),
                                                     batch_transform=mix()),
        "reference recipe without a batch step": Loader(shards, batch_size=a.batch, device="cpu",
                                                        num_workers=a.threads,
                                                        transform=T.Compose.from_torchvision(reference_recipe())),
    }
    rates: dict[str, list[float]] = {k: [] for k in loaders}
    runs = {case: epochs(ld) for case, ld in loaders.items()}
    for go in runs.values():
        go()  # (warm-up)
    for _ in range(max(1, a.repeat)):
        for case, go in runs.items():
            t = time.perf_counter()
            count = go()
            rates[case].append(count / (time.perf_counter() - t))
    for case, got in rates.items():
        rows[f"{case}, img/s"] = statistics.median(got)
    with_, without = (rows[f"{case}, img/s"] for case in loaders)
    rows["the batch step in the Loader, ms an image"] = (1.0 / with_ - 1.0 / without) * 1e3
    return rows


def _table(a, name: str | None, title: str, rows: dict[str, float], *, added: bool = False) -> None:
    """Prints rows of img/s (and, with `added`, each row's us an image over the first's);
    saves them as bench/_out/<name>.json when named."""
    width = max(len(title), *map(len, rows)) + 2
    kind = f"{getattr(a, 'image_size', '500x375')}{' grey' if getattr(a, 'grey', False) else ''}"
    print(f"{a.images} JPEGs {kind} q90, batch {a.batch}, {a.threads} threads/workers, {os.cpu_count()} cores")
    print(f"{title:{width}s} {'img/s':>8s}" + (f" {'added us/img':>13s}" if added else ""))
    base = next(iter(rows.values()))
    for row, r in rows.items():
        print(f"{row:{width}s} {r:8.0f}" + (f" {1e6 / r - 1e6 / base:13.0f}" if added else ""))
    if name:
        save(name, {"machine": machine(), "args": vars(a), "img_per_s": rows})


def main() -> None:
    ap = pipeline_args(__doc__, images=1024)
    ap.add_argument("--ops", action="store_true", help="only each step's added cost (no torchvision rows)")
    ap.add_argument("--skip-dali", action="store_true")
    ap.add_argument("--mixing", action="store_true",
                    help="only MixUp/CutMix/timm's Mixup alone and the reference recipe with and without them")
    ap.add_argument("--policies", action="store_true",
                    help="only the auto-augment policies, gpudecode, torchvision and DALI side by side")
    ap.add_argument("--crops", action="store_true", help="only evaluation over ten crops, gpudecode and torchvision")
    ap.add_argument("--as-written", action="store_true",
                    help="only recipes as scripts write them (rotation, bilinear rotation or flip first, CLIP's "
                         "preprocess, ToTensor first, a flip after the rotation, Resize(int) alone, Grayscale first, "
                         "ColorJitter first, a Resize before RRC, RandomCrop then Resize, Resize then rotation then "
                         "CenterCrop, a RandomChoice of crops, a padded crop resized, a RandomApply of a crop, a flip in a "
                         "RandomChoice)")
    ap.add_argument("--only", action="append", metavar="TEXT",
                    help="with --as-written: only the recipes whose names hold TEXT (may be given again)")
    ap.add_argument("--image-size", default="500x375", metavar="WxH", help="the JPEGs' size (default 500x375)")
    ap.add_argument("--grey", action="store_true", help="JPEGs of one channel (FER2013's faces: --image-size 48x48)")
    a = ap.parse_args()
    width, height = (int(v) for v in a.image_size.lower().split("x"))
    shards, folder = build(a.images, (width, height), a.grey)
    if a.as_written:
        rows = written(shards, folder, a)
        _table(a, "recipe_as_written", "recipe as written (on PIL images)", rows)
        values = list(rows.values())
        for (name, _), ours, theirs in zip(_picked(as_written(), a).items(), values[0::2], values[1::2]):
            print(f"{name}: gpudecode / torchvision = {ours / theirs:.2f}x")
        return
    if a.crops:
        rows = crops(shards, folder, a)
        _table(a, "recipe_crops", "Resize(256) + TenCrop(224) + Normalize", rows)
        values = list(rows.values())
        print(f"ten crops: gpudecode / torchvision = {values[0] / values[1]:.2f}x")
        return
    if a.mixing:
        rows = mixing(shards, a)
        for name, v in rows.items():
            print(f"{name:70s} {v:10.3f}")
        save("recipe_mixing", {"machine": machine(), "args": vars(a), "rows": rows})
        return
    if a.policies:
        _table(a, "recipe_policies", "RRC(224) + flip + policy + Normalize", policies(shards, folder, a))
        return
    if a.ops:
        _table(a, "recipe_ops", "gpudecode Loader (CPU)", op_costs(shards, a.threads, a.batch, a.repeat), added=True)
        return
    rows = {
        "reference (TA, erasing, MixUp/CutMix): gpudecode Loader": timed(
            gpudecode_reference(shards, a.threads, a.batch), a.repeat),
        "reference (TA, erasing, MixUp/CutMix): torchvision DataLoader": timed(
            torchvision_reference(folder, a.threads, a.batch), a.repeat),
    }
    if not a.skip_dali:
        rows["reference, TA only (no erasing, no mixing): DALI CPU pipeline"] = timed(
            dali_reference(folder, a.threads, a.batch), a.repeat)
    rows["DINO multi-crop 2x224 + 6x96: gpudecode Loader"] = timed(gpudecode_dino(shards, a.threads, a.batch),
                                                                   a.repeat)
    rows["DINO multi-crop 2x224 + 6x96: torchvision DataLoader"] = timed(torchvision_dino(folder, a.threads, a.batch),
                                                                         a.repeat)
    _table(a, None, "recipe and pipeline", rows)
    keys = list(rows)
    ratios = {"reference": rows[keys[0]] / rows[keys[1]], "dino": rows[keys[-2]] / rows[keys[-1]]}
    if not a.skip_dali:
        ratios["reference vs DALI (TA only)"] = rows[keys[0]] / rows[keys[2]]
    for name, r in ratios.items():
        print(f"{name}: gpudecode / other = {r:.2f}x")
    save("recipes", {"machine": machine(), "args": vars(a), "img_per_s": rows, "ratios": ratios})


if __name__ == "__main__":
    main()
