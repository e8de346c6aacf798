"""Any map-style Dataset given to the Loader as it is (own_sets.py, vision_sets.py): a
script's own class that names its files in a column (torchvision's tutorial's, with its
pandas CSV; paths and labels in lists), read from those files where its probed items are
theirs and its __getitem__ draws no random number; torchvision's Caltech101, Caltech256,
INaturalist, CelebA and LFWPeople, and timm's ImageDataset, read from their files; and
anything else (items of every image kind, an ImageFolder with a loader= of its own, a set
whose items are not its files', one drawing random numbers, one holding an open file, an
object with __getitem__ and __len__) read through its own __getitem__, its transform taken
off and run by the Loader, its target_transform kept. Each against the set's own items
(torchvision's DataLoader for the tutorial's), and named as it is read."""
from __future__ import annotations

import csv
import gc
import os
import pickle
import warnings

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms.v2 as tv2
from PIL import Image

from gpudecode import Loader, ShardReadError
from gpudecode import transforms as T

from conftest import PHOTO_NAMES


def _batches(ld):
    keys, images, labels = [], [], []
    for b in ld:
        keys += b.keys
        images.append(b.images.clone())
        labels.append(None if b.labels is None else b.labels.clone())
    return keys, torch.cat(images), None if labels[0] is None else torch.cat(labels)


def _rgb(img) -> torch.Tensor:
    """A PIL image as Pillow's convert("RGB") gives it, CHW."""
    return torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)


class CustomImageDataset(torch.utils.data.Dataset):
    """torchvision's tutorial's Dataset ("Datasets & DataLoaders"), as written there: a CSV
    of (file name, label) rows read by pandas, read_image, `transform` and
    `target_transform`; its file names kept in `names` instead where `hidden` (a column the
    Loader cannot see as one a sample: read through __getitem__)."""

    def __init__(self, annotations_file, img_dir, transform=None, target_transform=None, hidden=False):
        import pandas as pd

        self.img_labels = pd.read_csv(annotations_file)
        if hidden:
            self.img_labels = {"rows": self.img_labels.values.tolist()}
        self.img_dir = img_dir
        self.transform = transform
        self.target_transform = target_transform

    def __len__(self):
        return len(self.img_labels["rows"] if isinstance(self.img_labels, dict) else self.img_labels)

    def __getitem__(self, idx):
        from torchvision.io import read_image

        if isinstance(self.img_labels, dict):
            name, label = self.img_labels["rows"][idx]
        else:
            name, label = self.img_labels.iloc[idx, 0], self.img_labels.iloc[idx, 1]
        image = read_image(os.path.join(self.img_dir, name))
        if self.transform:
            image = self.transform(image)
        if self.target_transform:
            label = self.target_transform(label)
        return image, label


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory, photos):
    """Ten crops of the photographs as JPEG and PNG files, and the CSV naming them."""
    root = tmp_path_factory.mktemp("tutorial")
    rows = []
    for k in range(10):
        name = PHOTO_NAMES[k % len(PHOTO_NAMES)]
        p = photos[name]
        crop = p[7 * k:7 * k + 48 + k, 5 * k:5 * k + 56]
        fname = f"img{k}.{'png' if k % 3 == 0 else 'jpg'}"
        Image.fromarray(crop).save(root / fname)
        rows.append((fname, k % 4))
    with open(root / "labels.csv", "w", newline="") as f:
        csv.writer(f).writerows([("file", "label")] + rows)
    return str(root)


def test_torchvisions_tutorial_dataset_with_its_transform_against_dataloader(tutorial):
    """The tutorial's Dataset with a v2 transform on its tensors and a target_transform:
    the Loader's batches are DataLoader's (the same crop, flip and Normalize). Its
    DataFrame names its files under its img_dir, so the Loader reads them (keys their
    names); with the names where the Loader cannot see them, through its __getitem__
    (keys its indices)."""
    tf = tv2.Compose([tv2.CenterCrop(40), tv2.RandomHorizontalFlip(p=1.0), tv2.ToDtype(torch.float32, scale=True),
                      tv2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    for hidden in (False, True):
        ds = CustomImageDataset(f"{tutorial}/labels.csv", tutorial, transform=tf, target_transform=lambda y: 3 - y,
                                hidden=hidden)
        want = list(torch.utils.data.DataLoader(ds, batch_size=4))
        with Loader(ds, batch_size=4, device="cpu", shuffle=False) as ld:
            got = list(ld)
            assert ld.describe()["file_sources"] == ["CustomImageDataset(10, read through its __getitem__)" if hidden
                                                     else f"CustomImageDataset(10 files, in {tutorial})"]
            assert ld.dataset.targets == [3 - k % 4 for k in range(10)]
        assert ds.transform is tf  # (taken off a copy: the set is as it was)
        assert len(got) == len(want) == 3
        for b, (x, y) in zip(got, want):
            torch.testing.assert_close(b.images, x, atol=1e-6, rtol=0)  # (x * (1/255) against x / 255)
            assert torch.equal(b.labels, y)
        assert got[0].keys == ([f"{i:09d}" for i in range(4)] if hidden else [f"img{i}" for i in range(4)])


class OwnTransforms(torch.utils.data.Dataset):
    """A set that runs a transform of its own, named `transforms` (not torchvision's pair
    of transform and target_transform): left to it, as DataLoader would."""

    def __init__(self, photo, transforms):
        self.photo, self.transforms = photo, transforms

    def __len__(self):
        return 3

    def __getitem__(self, i):
        return self.transforms(Image.fromarray(self.photo[10 * i:10 * i + 40, :44])), i


def test_a_transform_of_its_own_under_another_name_is_left_to_it(photos):
    ds = OwnTransforms(photos["coffee"], tv2.CenterCrop(24))
    with Loader(ds, batch_size=3, transform=None, device="cpu", shuffle=False) as ld:
        _, got, labs = _batches(ld)
    assert torch.equal(got, torch.stack([_rgb(ds[i][0]) for i in range(3)])) and got.shape[-1] == 24
    floats = OwnTransforms(photos["coffee"], tv2.Compose([tv2.PILToTensor(), tv2.ToDtype(torch.float32, scale=True)]))
    with pytest.raises(TypeError, match=r"item 0 is \(Tensor float32 \[3, 40, 44\], int\).*under another name must go"):
        Loader(floats, batch_size=3, device="cpu")


class Kinds(torch.utils.data.Dataset):
    """Items of every image kind a Dataset gives: PIL images (RGB, grey, RGBA, palette),
    uint8 tensors [3, H, W], [1, H, W], [H, W], uint8 arrays [H, W, 3], [H, W, 1],
    [H, W] (strided or not); `labelled` False: images alone."""

    def __init__(self, photo, labelled=True):
        self.photo, self.labelled = photo, labelled

    def __len__(self):
        return 10

    def image(self, i):
        p = self.photo[3 * i:3 * i + 20, 2 * i:2 * i + 24]
        pil = Image.fromarray(p)
        grey = np.array(pil.convert("L"))
        return [pil, pil.convert("L"), pil.convert("RGBA"), pil.convert("P"),
                torch.from_numpy(p).permute(2, 0, 1), torch.from_numpy(grey)[None], torch.from_numpy(grey),
                p[:, ::-1], grey[:, :, None], grey][i]

    def __getitem__(self, i):
        return (self.image(i), i) if self.labelled else self.image(i)


def _want(img) -> torch.Tensor:
    """What an item's image is as RGB CHW: Pillow's conversion, or the tensor or array's
    channels (one made three)."""
    if isinstance(img, Image.Image):
        return _rgb(img)
    t = torch.as_tensor(np.ascontiguousarray(img))
    t = t[None] if t.ndim == 2 else (t.permute(2, 0, 1) if isinstance(img, np.ndarray) else t)
    return t.expand(3, -1, -1)


@pytest.mark.parametrize("labelled", [True, False], ids=["image-label", "image-alone"])
def test_every_image_kind_an_item_gives(photos, labelled):
    """Every kind of image an item gives, as Pillow's RGB conversion makes it (PIL images)
    or with its channels (one made three); a set of images alone is refused unless
    labels=False, then read without."""
    from gpudecode import LabelError

    ds = Kinds(photos["astronaut"], labelled)
    if not labelled:
        with pytest.raises(LabelError, match=r"have no labels \(images alone\): give labels=False .*shard 'Kinds"):
            Loader(ds, batch_size=1, transform=None, device="cpu")
    with Loader(ds, batch_size=1, transform=None, device="cpu", shuffle=False, labels=labelled) as ld:
        keys, got, labs = _batches(ld)
    assert keys == [f"{i:09d}" for i in range(10)]
    assert labs is None if not labelled else labs.tolist() == list(range(10))
    for i in range(10):
        assert torch.equal(got[i], _want(ds.image(i))), i


def test_torchvisions_caltech_and_celeba_from_the_files_their_getitem_opens(tmp_path, photos):
    """torchvision's Caltech101, Caltech256 (images named by their place in each
    category's folder, grey ones among them), INaturalist (its full and kingdom targets)
    and CelebA (identity targets) on files in their layouts: read from the files their __getitem__ opens, every image and label
    their own; CelebA with its attributes as targets (40 values) refused by what it is."""
    from torchvision.datasets import Caltech101, Caltech256, CelebA, INaturalist

    cats = ["BACKGROUND_Google", "accordion", "anchor", "ant"]
    for c, cat in enumerate(cats):
        for k in range(1, 3 + c % 2):
            im = Image.fromarray(photos[PHOTO_NAMES[(c + k) % len(PHOTO_NAMES)]][:30 + k, :36])
            for where, name in (("caltech101/101_ObjectCategories", f"image_{k:04d}.jpg"),
                                ("caltech256/256_ObjectCategories", f"{c + 1:03d}_{k:04d}.jpg")):
                folder = tmp_path / where / (cat if "101" in where else f"{c + 1:03d}.{cat}")
                folder.mkdir(parents=True, exist_ok=True)
                (im.convert("L") if k == 2 else im).save(folder / name, quality=90)
    celeba = tmp_path / "celeba"
    (celeba / "img_align_celeba").mkdir(parents=True)
    names = [f"{k:06d}.jpg" for k in range(1, 7)]
    for k, name in enumerate(names):
        Image.fromarray(photos[PHOTO_NAMES[k]][:36, :30]).save(celeba / "img_align_celeba" / name, quality=90)
    (celeba / "list_eval_partition.txt").write_text("".join(f"{n} {k % 2}\n" for k, n in enumerate(names)))
    (celeba / "identity_CelebA.txt").write_text("".join(f"{n} {100 + k}\n" for k, n in enumerate(names)))
    for fname, cols in (("list_bbox_celeba.txt", "x_1 y_1"), ("list_landmarks_align_celeba.txt", "lefteye_x"),
                        ("list_attr_celeba.txt", "Smiling Young")):
        (celeba / fname).write_text(f"{len(names)}\n{cols}\n" +
                                    "".join(f"{n} {' '.join(['1'] * len(cols.split()))}\n" for n in names))

    class StandInCelebA(CelebA):
        def _check_integrity(self):
            return True

    for k, kind in enumerate(["00000_Animalia_Chordata_Aves_Passeriformes_Corvidae_Corvus_corax",
                              "00001_Plantae_Tracheophyta_Magnoliopsida_Rosales_Rosaceae_Rosa_canina"]):
        (tmp_path / "2021_train_mini" / kind).mkdir(parents=True)
        for j in range(2 + k):
            Image.fromarray(photos[PHOTO_NAMES[k + j]][:32, :40]).save(tmp_path / "2021_train_mini" / kind / f"{j}.jpg")
    crop = tv2.Compose([tv2.PILToTensor(), tv2.CenterCrop(28)])
    sets = [Caltech101(str(tmp_path), transform=crop), Caltech256(str(tmp_path), transform=crop),
            INaturalist(str(tmp_path), "2021_train_mini", transform=crop),
            INaturalist(str(tmp_path), "2021_train_mini", target_type="kingdom", transform=crop),
            StandInCelebA(str(tmp_path), split="train", target_type="identity", transform=crop)]
    for ds in sets:
        with Loader(ds, batch_size=3, device="cpu", shuffle=False) as ld:
            _, got, labs = _batches(ld)
            assert "through its __getitem__" not in ld.describe()["file_sources"][0], ld.describe()["file_sources"]
            assert ld.dataset.targets == labs.tolist()
        ds.transform = None
        assert len(got) == len(ds) > 0
        for i in range(len(ds)):
            img, y = ds[i]
            assert int(labs[i]) == y and torch.equal(got[i], tv2.CenterCrop(28)(_rgb(img))), (type(ds).__name__, i)
    assert labs.tolist() == [100, 102, 104]
    with pytest.raises(TypeError, match=r"reads a StandInCelebA as \(image, label\) items: item 0 is \(JpegImageFile, Tensor "
                                        r"int64 \[2\]\)"):
        Loader(StandInCelebA(str(tmp_path), split="train"), batch_size=3, device="cpu")


def test_an_image_folder_with_its_own_loader_and_one_with_a_target_transform(tmp_path, photos):
    """An ImageFolder with a loader= of its own is read through its __getitem__ (its
    loader opens each file); one with a target_transform from its files, the labels
    through it."""
    from torchvision.datasets import ImageFolder

    for c in ("cat", "dog"):
        (tmp_path / c).mkdir()
        for k in range(3):
            Image.fromarray(photos["chelsea"][10 * k:10 * k + 30, :40]).save(tmp_path / c / f"{k}.png")

    def grey(path):
        with Image.open(path) as im:
            return im.convert("L")

    own = ImageFolder(str(tmp_path), loader=grey)
    with Loader(own, batch_size=6, transform=None, device="cpu", shuffle=False) as ld:
        _, got, labs = _batches(ld)
        assert ld.describe()["file_sources"] == [
            f"ImageFolder(6, read through its __getitem__: its own loader= opens its files, in {tmp_path})"]
    for i in range(6):
        img, y = own[i]
        assert img.mode == "L" and int(labs[i]) == y and torch.equal(got[i], _rgb(img))
    shifted = ImageFolder(str(tmp_path), target_transform=lambda y: y + 7)
    with Loader(shifted, batch_size=6, transform=None, device="cpu", shuffle=False) as ld:
        keys, got, labs = _batches(ld)
        assert ld.describe()["file_sources"] == [str(tmp_path)] and ld.dataset.classes == ["cat", "dog"]
        assert ld.dataset.targets == [shifted[i][1] for i in range(6)]
    assert labs.tolist() == [7, 7, 7, 8, 8, 8] and keys[0] == "cat/0"
    for i in range(6):
        assert torch.equal(got[i], _rgb(shifted[i][0]))


class Boxes(torch.utils.data.Dataset):
    """A class of its own with `samples` ((path, label) pairs) whose items are its files'
    images (cropped where `crop`), as PIL images or tensors."""

    def __init__(self, samples, crop=False, tensors=False):
        self.samples, self.crop, self.tensors = samples, crop, tensors

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, y = self.samples[i]
        with Image.open(path) as im:
            im = im.convert("RGB")
            if self.crop:
                im = im.crop((2, 3, 20, 25))
        return (torchvision.transforms.functional.pil_to_tensor(im) if self.tensors else im), y


def test_a_class_with_samples_is_read_from_its_files_only_where_its_items_are_theirs(tmp_path, photos):
    pairs = []
    for k in range(5):
        path = tmp_path / f"{k}.jpg"
        Image.fromarray(photos["coffee"][20 * k:20 * k + 40, :50]).save(path, quality=92)
        pairs.append((str(path), k % 2))
    for ds, files in ((Boxes(pairs), True), (Boxes(pairs, tensors=True), True), (Boxes(pairs, crop=True), False)):
        with Loader(ds, batch_size=5, transform=None, device="cpu", shuffle=False) as ld:
            _, got, labs = _batches(ld)
            named = ld.describe()["file_sources"][0]
        assert ("through its __getitem__" not in named) == files, named
        for i in range(5):
            img, y = ds[i]
            assert int(labs[i]) == y and torch.equal(got[i], img if ds.tensors else _rgb(img)), (named, i)


class Flaky(Kinds):
    def __getitem__(self, i):
        if i == 6:
            raise OSError("the share went away")
        return super().__getitem__(i)


def test_an_item_that_fails_is_named_and_the_list_pickles_and_keeps(photos):
    """An item whose __getitem__ raises is its own error, named (passed over under
    on_error="warn"); the list pickles as its set; keep="ram" gives the streamed batches."""
    with pytest.raises(ShardReadError, match=r"could not make the sample: OSError: the share went away \(shard "
                                             r"'Flaky\(10, read through its __getitem__\)/6', key '000000006'\)"):
        with Loader(Flaky(photos["rocket"]), batch_size=2, transform=None, device="cpu", shuffle=False) as ld:
            list(ld)
    with pytest.warns(RuntimeWarning, match="the share went away"):
        with Loader(Flaky(photos["rocket"]), batch_size=2, transform=None, device="cpu", shuffle=False,
                    on_error="warn") as ld:
            keys, _, _ = _batches(ld)
    assert keys == [f"{i:09d}" for i in range(10) if i != 6]
    ds = Kinds(photos["rocket"])
    tf = T.Compose([T.RandomResizedCrop(16), T.RandomHorizontalFlip()])
    with Loader(ds, batch_size=4, transform=tf, device="cpu", seed=2) as ld:
        again = pickle.loads(pickle.dumps(ld.dataset))
        for i in (0, 4, 9):
            (a, la), (b, lb) = ld.dataset[i], again[i]
            assert la == lb == i and torch.equal(a, b)
    epochs = {}
    for keep in (None, "ram"):
        with Loader(ds, batch_size=4, transform=tf, device="cpu", seed=2, keep=keep) as ld:
            epochs[keep] = []
            for e in range(2):
                ld.set_epoch(e)
                epochs[keep].append(_batches(ld))
            if keep:
                assert ld.describe()["keep"]["tier"] == "ram"
    for (k0, x0, y0), (k1, x1, y1) in zip(epochs[None], epochs["ram"]):
        assert k0 == k1 and torch.equal(x0, x1) and torch.equal(y0, y1)


@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
def test_timms_image_dataset_is_read_from_its_files(tmp_path, photos):
    """timm's create_dataset for a folder (an ImageDataset over its folder reader, as timm's
    train.py makes one): read from its files as an ImageFolder is (classes, keys, targets),
    every image and label its __getitem__'s; with input_img_mode="L" its items are not its
    files' images, so it is read through its __getitem__."""
    from timm.data import create_dataset

    for c, cls in enumerate(["tench", "goldfish", "shark"]):
        (tmp_path / cls).mkdir()
        for k in range(2 + c):
            Image.fromarray(photos[PHOTO_NAMES[c + k]][k:36 + k, :40]).save(tmp_path / cls / f"{k}.jpg", quality=90)
    ds = create_dataset("", root=str(tmp_path), split="train")
    with Loader(ds, batch_size=4, transform=None, device="cpu", shuffle=False) as ld:
        keys, got, labs = _batches(ld)
        assert ld.describe()["file_sources"] == [str(tmp_path)]
        assert ld.dataset.classes == ["goldfish", "shark", "tench"]  # (timm's class_to_idx: sorted names)
        assert ld.dataset.targets == [ds[i][1] for i in range(len(ds))]
    assert keys == [os.path.splitext(ds.filename(i))[0] for i in range(len(ds))]
    for i in range(len(ds)):
        img, y = ds[i]
        assert int(labs[i]) == y and torch.equal(got[i], _rgb(img)), i
    grey = create_dataset("", root=str(tmp_path), split="train", input_img_mode="L")
    with Loader(grey, batch_size=9, transform=None, device="cpu", shuffle=False) as ld:
        _, got, _ = _batches(ld)
        assert "read through its __getitem__: its items are not its files'" in ld.describe()["file_sources"][0]
    assert all(torch.equal(got[i], _rgb(grey[i][0])) for i in range(len(grey)))
    gc.collect()  # (timm's folder reader leaves each file it opens to the collector: its warnings, here)


class Duck:
    """A set of its own that is no torch Dataset (DataLoader takes it: __getitem__ and
    __len__)."""

    def __init__(self, photo):
        self.photo = photo

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return self.photo[5 * i:5 * i + 20, :24], i


def test_an_object_with_getitem_and_len_is_a_map_style_set(photos, tmp_path):
    """An object of a class of its own with __getitem__ and __len__ is a map-style set, as
    DataLoader takes it; an array or pandas Series of paths stays a list of files."""
    import pandas as pd

    paths = []
    for k in range(3):
        paths.append(str(tmp_path / f"{k}.png"))
        Image.fromarray(photos["coffee"][k:k + 20, :20]).save(paths[-1])
    for listed in (np.array(paths), pd.Series(paths)):
        with Loader(listed, batch_size=3, transform=None, device="cpu", labels=False) as ld:
            assert ld.describe()["file_sources"] == ["<list of 3 files>"] and len(next(iter(ld)).keys) == 3
    ds = Duck(photos["chelsea"])
    want = list(torch.utils.data.DataLoader(ds, batch_size=4))[0]  # (HWC arrays, collated as they are)
    with Loader(ds, batch_size=4, transform=None, device="cpu", shuffle=False) as ld:
        _, got, labs = _batches(ld)
    assert torch.equal(got, want[0].permute(0, 3, 1, 2)) and torch.equal(labs, want[1])
    with Loader([ds, Duck(photos["coffee"])], batch_size=4, transform=None, device="cpu", shuffle=False) as ld:
        assert ld.describe()["file_sources"] == ["Duck(4, read through its __getitem__)",
                                                 "Duck(4, read through its __getitem__, item 1 of the list)"]
        assert sum(len(b.keys) for b in ld) == 8
    with pytest.raises(ValueError, match=r"'Duck\(4, read through its __getitem__\)' is named twice .*repeat=k"):
        Loader([ds, ds], batch_size=4, transform=None, device="cpu")


class Packed(torch.utils.data.Dataset):
    """A set of its own that reads its images from one file it holds open (raw HWC
    pixels at fixed offsets: a seek, then a read), opened at its first call as a
    DataLoader set opens it in each worker; `pread`: read with os.pread (no shared
    position) instead."""

    def __init__(self, path, n, shape, pread=False):
        self.path, self.n, self.shape, self.pread, self.f = path, n, shape, pread, None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        size = int(np.prod(self.shape))
        if self.pread:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                data = os.pread(fd, size, i * size)
            finally:
                os.close(fd)
        else:
            if self.f is None:
                self.f = open(self.path, "rb")
            self.f.seek(i * size)
            data = self.f.read(size)
        return np.frombuffer(data, np.uint8).reshape(self.shape), i % 3


def test_a_set_holding_an_open_file_is_called_one_item_at_a_time(tmp_path, photos):
    """The reader threads would share a set's open file (one thread's seek between
    another's seek and read: the wrong pixels, said by nothing): such a set is called one
    item at a time, said once; 400 images over 4 threads, every one its own. A set that
    opens nothing it keeps is called on every thread."""
    shape = (24, 32, 3)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (400, *shape), dtype=np.uint8)
    images[:, :8] = photos["rocket"][:8, :32]
    path = str(tmp_path / "packed.bin")
    images.tofile(path)
    ds = Packed(path, 400, shape)
    with pytest.warns(RuntimeWarning, match=r"Packed's __getitem__ is called one item at a time.*holds self.f "
                                            r"\(BufferedReader\).*os.pread"):
        ld = Loader(ds, batch_size=40, transform=None, device="cpu", shuffle=True, seed=1, num_threads=4)
    with ld:
        for _ in range(2):
            for b in ld:
                for k, img in zip(b.keys, b.images):
                    assert torch.equal(img, torch.from_numpy(images[int(k)]).permute(2, 0, 1)), k
        ld.reader.files[ld.reader.urls[0]].make.plain.f.close()  # (its copy's file: the set never closes it)
    assert ds.f is None  # (its copy opened the file: the set itself is as it was)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Loader(Packed(path, 400, shape, pread=True), batch_size=40, transform=None, device="cpu",
                    num_threads=4) as ld:
            assert ld.reader.files[ld.reader.urls[0]].make.lock is None


class Counted(Duck):
    """A set with its own `targets`, counting its __getitem__ calls."""

    def __init__(self, photo, targets):
        super().__init__(photo)
        self.targets, self.calls = targets, 0

    def __getitem__(self, i):
        self.calls += 1
        return self.photo[5 * i:5 * i + 20, :24], 3 * i


def test_targets_from_the_sets_own_labels_where_its_items_agree(photos):
    """loader.dataset.targets of a set read through __getitem__: from its own `targets`
    where its first, middle and last items have those labels (no item made for it), else
    from its items."""
    own = Counted(photos["chelsea"], [0, 3, 6, 9])
    with Loader(own, batch_size=4, transform=None, device="cpu") as ld:
        ld.reader.files[ld.reader.urls[0]].make.plain.calls = 0
        assert ld.dataset.targets == [0, 3, 6, 9]
        assert ld.reader.files[ld.reader.urls[0]].make.plain.calls == 0
    stale = Counted(photos["chelsea"], [0, 1, 2, 3])  # (its targets are not its items' labels)
    with Loader(stale, batch_size=4, transform=None, device="cpu", shuffle=False) as ld:
        assert ld.dataset.targets == [0, 3, 6, 9] and next(iter(ld)).labels.tolist() == [0, 3, 6, 9]


class Paths(torch.utils.data.Dataset):
    """A set of its own as many scripts write one: its image files' paths in a list, their
    labels in another; each item opened with PIL (made grey where `grey`), or read with
    torchvision's read_image (`tensors`)."""

    def __init__(self, image_paths, labels=None, transform=None, grey=False, tensors=False):
        self.image_paths, self.transform, self.grey, self.tensors = image_paths, transform, grey, tensors
        if labels is not None:
            self.labels = labels

    def __len__(self):
        return len(self.image_paths)

    def __getitem__(self, i):
        from torchvision.io import read_image

        if self.tensors:
            img = read_image(self.image_paths[i])
        else:
            with Image.open(self.image_paths[i]) as im:
                img = im.convert("L" if self.grey else "RGB")
        if self.transform:
            img = self.transform(img)
        return (img, self.labels[i]) if hasattr(self, "labels") else img


def test_a_set_that_lists_its_files_paths_is_read_from_its_files(tmp_path, photos):
    """A set of its own keeping its files' paths and labels in lists is read from its files
    (the Loader's decoder, keys their paths under their folder), the same images and labels
    as its items, its transform run; one whose items are not its files' images (grey) is
    read through its __getitem__; images alone with labels=False; torchvision's LFWPeople
    (its paths in `data`) too."""
    paths = []
    for k in range(7):
        (tmp_path / f"c{k % 2}").mkdir(exist_ok=True)
        path = tmp_path / f"c{k % 2}" / f"{k}.{'png' if k % 3 else 'jpg'}"
        Image.fromarray(photos[PHOTO_NAMES[k]][:40, :48]).save(path)
        paths.append(str(path))
    labels = [k % 2 for k in range(7)]
    tf = tv2.Compose([tv2.CenterCrop(32), tv2.ToImage(), tv2.ToDtype(torch.float32, scale=True)])
    for ds in (Paths(paths, labels, transform=tf), Paths(paths, labels, transform=tf, tensors=True)):
        want = list(torch.utils.data.DataLoader(ds, batch_size=7))[0]
        with Loader(ds, batch_size=7, device="cpu", shuffle=False) as ld:
            b = next(iter(ld))
            assert ld.describe()["file_sources"] == [f"Paths(7 files, in {tmp_path})"]
        torch.testing.assert_close(b.images, want[0], atol=1e-6, rtol=0)
        assert b.labels.tolist() == labels and b.keys == [f"c{k % 2}/{k}" for k in range(7)]
    grey = Paths(paths, labels, grey=True)
    with Loader(grey, batch_size=7, transform=None, device="cpu", shuffle=False) as ld:
        _, got, _ = _batches(ld)
        assert ld.describe()["file_sources"] == ["Paths(7, read through its __getitem__)"]
    assert all(torch.equal(got[i], _rgb(grey[i][0])) for i in range(7))
    holed = Paths(paths[:2] + [None] + paths[3:], labels)  # (a value that names no file, where no probe looks)
    with Loader(holed, batch_size=7, transform=None, device="cpu", shuffle=False, on_error="skip") as ld:
        keys, _, _ = _batches(ld)
        assert ld.describe()["file_sources"] == ["Paths(7, read through its __getitem__)"]
    assert keys == [f"{i:09d}" for i in range(7) if i != 2]
    alone = Paths(paths)
    with Loader(alone, batch_size=7, transform=tv2.CenterCrop(30), device="cpu", shuffle=False, labels=False) as ld:
        b = next(iter(ld))
        assert b.labels is None and ld.describe()["file_sources"] == [f"Paths(7 files, in {tmp_path})"]
    assert torch.equal(b.images, torch.stack([tv2.CenterCrop(30)(_rgb(alone[i])) for i in range(7)]))


def test_torchvisions_lfw_people_is_read_from_its_files(tmp_path, photos):
    from torchvision.datasets import LFWPeople

    class StandInLFW(LFWPeople):
        def _check_integrity(self):
            return True

    base = tmp_path / "lfw-py"
    people = {"Ada_Lovelace": 2, "Alan_Turing": 3}
    for p, (name, count) in enumerate(people.items()):
        for k in range(1, count + 1):
            (base / "lfw_funneled" / name).mkdir(parents=True, exist_ok=True)
            Image.fromarray(photos[PHOTO_NAMES[p + k]][:50, :50]).save(base / "lfw_funneled" / name /
                                                                       f"{name}_{k:04d}.jpg", quality=92)
    (base / "lfw-names.txt").write_text("".join(f"{n}\t{c}\n" for n, c in people.items()))
    (base / "peopleDevTrain.txt").write_text(f"{len(people)}\n" + "".join(f"{n}\t{c}\n" for n, c in people.items()))
    ds = StandInLFW(str(tmp_path), split="train")
    with Loader(ds, batch_size=5, transform=None, device="cpu", shuffle=False) as ld:
        keys, got, labs = _batches(ld)
        assert ld.describe()["file_sources"] == [f"StandInLFW(5 files, in {base})"]
        assert ld.dataset.targets == ds.targets == [0, 0, 1, 1, 1]
    assert keys[0] == "lfw_funneled/Ada_Lovelace/Ada_Lovelace_0001"
    for i in range(5):
        img, y = ds[i]
        assert int(labs[i]) == y and torch.equal(got[i], _rgb(img))


class Rare(Paths):
    """A set that lists its files but augments its items itself, under no `transform`: a
    flip it draws (Python's generator, or one it holds) and almost never takes, so its
    probed items are its files' images."""

    def __init__(self, image_paths, labels, own_rng=False):
        super().__init__(image_paths, labels)
        self.rng = np.random.default_rng(0) if own_rng else None

    def __getitem__(self, i):
        import random

        img, y = super().__getitem__(i)
        draw = self.rng.random() if self.rng is not None else random.random()
        return (img.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if draw < 1e-12 else img), y


def test_a_set_that_draws_random_numbers_is_read_through_its_getitem(tmp_path, photos):
    """Its items drawn at random (an augmentation of its own the probed items may not
    show): read through __getitem__, never from its files, whatever its items look like."""
    paths = []
    for k in range(4):
        paths.append(str(tmp_path / f"{k}.png"))
        Image.fromarray(photos[PHOTO_NAMES[k]][:30, :30]).save(paths[-1])
    with Image.open(paths[2]) as im:
        assert torch.equal(_rgb(Rare(paths, [0] * 4)[2][0]), _rgb(im))
    for own_rng in (False, True):
        with Loader(Rare(paths, [0, 1, 0, 1], own_rng), batch_size=4, transform=None, device="cpu") as ld:
            assert ld.describe()["file_sources"] == ["Rare(4, read through its __getitem__)"], own_rng
    with Loader(Paths(paths, [0, 1, 0, 1]), batch_size=4, transform=None, device="cpu") as ld:
        assert ld.describe()["file_sources"] == [f"Paths(4 files, in {tmp_path})"]


def test_a_wide_frame_reads_only_the_columns_it_takes(tutorial, monkeypatch):
    """A DataFrame with many columns beside its file names and labels (features, metadata):
    read from its files, only the two columns taken read whole."""
    import pandas as pd

    ds = CustomImageDataset(f"{tutorial}/labels.csv", tutorial)
    wide = pd.DataFrame({f"f{j}": np.arange(10) * j for j in range(300)})
    ds.img_labels = pd.concat([ds.img_labels, wide], axis=1)
    calls = []
    real = pd.Series.tolist
    monkeypatch.setattr(pd.Series, "tolist", lambda self: calls.append(self.name) or real(self))
    with Loader(ds, batch_size=5, transform=tv2.CenterCrop(40), device="cpu", shuffle=False) as ld:
        _, got, labs = _batches(ld)
        assert ld.describe()["file_sources"] == [f"CustomImageDataset(10 files, in {tutorial})"]
    assert sorted(calls) == ["file", "label"]
    assert labs.tolist() == [k % 4 for k in range(10)]
    assert torch.equal(got, torch.stack([tv2.CenterCrop(40)(ds[i][0]) for i in range(10)]))
