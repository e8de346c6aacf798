"""torchvision's in-memory datasets given to the Loader as they are (gpudecode/vision_sets.py):
CIFAR10 (HWC array), SVHN (CHW) and MNIST (grey), each written in torchvision's own file
format from scikit-image's photographs and loaded by torchvision's own classes (only
their checksums skipped); every image and label against the set's own __getitem__, the
set's torchvision transform against torchvision itself (MNIST) or against the same
images from PNG shards (CIFAR10, the same draws); a set whose __getitem__ disagrees with
its array read through __getitem__; made lists (these, FakeData) pickled whole."""
from __future__ import annotations

import io
import os
import pickle
import struct

import numpy as np
import pytest
import torch
import torchvision
import torchvision.transforms as tvt
import torchvision.transforms.v2 as tv2
from PIL import Image

from gpudecode import Loader, TransformError
from gpudecode import transforms as T

from conftest import encode, make_shard


def _photos(n: int, size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n size x size RGB crops of scikit-image's photographs, and a label for each (the
    photograph)."""
    from skimage import data

    pictures = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    rng = np.random.default_rng(seed)
    out, labels = [], []
    for _ in range(n):
        c = int(rng.integers(len(pictures)))
        p = pictures[c]
        s = int(rng.integers(size, min(p.shape[:2]) // 2))
        t, l = int(rng.integers(0, p.shape[0] - s)), int(rng.integers(0, p.shape[1] - s))
        out.append(np.asarray(Image.fromarray(p[t:t + s, l:l + s]).resize((size, size), Image.Resampling.BILINEAR)))
        labels.append(c)
    return np.stack(out), np.asarray(labels)


class StandInCIFAR10(torchvision.datasets.CIFAR10):
    """torchvision's CIFAR10 on files in its format that are not CIFAR's: only the checksums
    go unchecked (loading and __getitem__ are torchvision's)."""

    def _check_integrity(self) -> bool:
        return True

    def _load_meta(self) -> None:
        self.classes = ["astronaut", "coffee", "chelsea", "rocket"] + [f"c{i}" for i in range(4, 10)]
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}


class StandInSVHN(torchvision.datasets.SVHN):
    def _check_integrity(self) -> bool:
        return True


class Mirrored(StandInCIFAR10):
    """A set whose __getitem__ is not its array's image (a flip of it)."""

    def __getitem__(self, i):
        img, y = super().__getitem__(i)
        return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT), y


class Tensors(StandInCIFAR10):
    """A set whose items are tensors, not PIL images."""

    def __getitem__(self, i):
        return torch.from_numpy(self.data[i]).permute(2, 0, 1), int(self.targets[i])


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar")
    base = root / "cifar-10-batches-py"
    base.mkdir()
    images, labels = _photos(100, 32)
    for k, name in enumerate([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]):
        part = slice(20 * k, 20 * k + 20) if k < 5 else slice(0, 10)
        with open(base / name, "wb") as f:  # rows: the red plane, then green, then blue
            pickle.dump({"data": images[part].transpose(0, 3, 1, 2).reshape(-1, 3072),
                         "labels": labels[part].tolist()}, f)
    return str(root), images, labels


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    root = tmp_path_factory.mktemp("mnist")
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rgb, labels = _photos(40, 28, seed=1)
    grey = np.asarray([np.asarray(Image.fromarray(im).convert("L")) for im in rgb])
    for split in ("train", "t10k"):
        for name, arr in (("images-idx3", grey), ("labels-idx1", labels.astype(np.uint8))):
            with open(raw / f"{split}-{name}-ubyte", "wb") as f:  # the IDX format: magic, dims, data
                f.write(struct.pack(">HBB", 0, 8, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes())
    return str(root), grey, labels


def _batches(ld):
    keys, images, labels = [], [], []
    for b in ld:
        keys += b.keys
        images.append(b.images.clone())
        labels.append(b.labels.clone())
    return keys, torch.cat(images), torch.cat(labels)


def _pil_tensor(img: Image.Image) -> torch.Tensor:
    return torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)


@pytest.mark.parametrize("copied", [True, False], ids=["made-hwc-once", "each-image-gathered"])
def test_cifar10_as_it_lies_every_image_and_label_its_getitems(cifar, copied, monkeypatch):
    """(CIFAR10's array is a strided HWC view of its planes: copied as HWC once when it is
    small enough, else each image gathered from the view.)"""
    import gpudecode.vision_sets

    if not copied:
        monkeypatch.setattr(gpudecode.vision_sets, "_HWC_COPY", 0)
    root, images, labels = cifar
    ds = StandInCIFAR10(root, train=True)
    assert ds.data.shape == (100, 32, 32, 3) and not ds.data.flags.c_contiguous
    with Loader(ds, batch_size=16, transform=None, device="cpu", shuffle=True, seed=1) as ld:
        keys, got, labs = _batches(ld)
        assert ld.reader.classes == ds.classes and ld.num_samples == 100
        d = ld.describe()
        assert (d["shards"], d["image_files"], d["file_sources"]) == (
            0, 100, [f"StandInCIFAR10(100 images of 32x32, train, in {os.path.abspath(root)})"])
    assert sorted(keys) == [f"{i:09d}" for i in range(100)]  # every image once, shuffled
    for key, img, lab in zip(keys, got, labs.tolist()):
        want, y = ds[int(key)]
        assert lab == y == labels[int(key)] and torch.equal(img, _pil_tensor(want)), key
    test = StandInCIFAR10(root, train=False)
    with Loader(test, batch_size=10, transform=None, device="cpu", shuffle=False) as ld:
        _, got, labs = _batches(ld)
    assert torch.equal(got, torch.from_numpy(images[:10]).permute(0, 3, 1, 2)) and labs.tolist() == labels[:10].tolist()


def test_cifar10s_own_torchvision_transform_as_from_png_shards(cifar, tmp_path):
    """The set's transform (the CIFAR recipe, torchvision's) taken as a Loader takes it:
    the batches the same images give from PNG shards, in the same order, with the same
    seed (each draw comes from the seed, the epoch and the sample's place)."""
    root, images, labels = cifar
    tv = tvt.Compose([tvt.RandomCrop(32, padding=4), tvt.RandomHorizontalFlip(), tvt.ToTensor(),
                      tvt.Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))])
    ds = StandInCIFAR10(root, train=True, transform=tv)
    shard = make_shard(tmp_path / "c-0.tar", [{"__key__": f"{i:09d}", "png": encode(images[i], "PNG"),
                                               "cls": str(int(labels[i])).encode()} for i in range(100)])
    out = []
    for src, tf in ((ds, None), (shard, tv)):
        with Loader(src, batch_size=32, transform=tf, device="cpu", shuffle=False, seed=7) as ld:
            assert ld.describe()["transform"] == ["RandomCrop", "RandomHorizontalFlip", "ToDtype", "Normalize"]
            ld.set_epoch(2)
            out.append(_batches(ld))
    (ka, a, la), (kb, b, lb) = out
    assert ka == kb and torch.equal(la, lb) and torch.equal(a, b) and a.dtype == torch.float32


def test_mnist_grey_with_its_normalize_against_torchvision(mnist):
    """MNIST's images are grey (an [N, 28, 28] tensor): one channel, as torchvision's; its
    usual transform (ToTensor + one-value Normalize) against torchvision's own ds[i]; with
    ColorJitter, saturation and hue change nothing and contrast takes the channel's mean,
    as torchvision's ops on one channel replaying the Loader's draws."""
    root, grey, labels = mnist
    tv = tvt.Compose([tvt.ToTensor(), tvt.Normalize((0.1307,), (0.3081,))])
    ds = torchvision.datasets.MNIST(root, train=True, transform=tv)
    with Loader(ds, batch_size=8, device="cpu", shuffle=False) as ld:
        keys, got, labs = _batches(ld)
        assert ld.reader.classes == ds.classes and ld.transform.channels == 1 and ld.describe()["channels"] == 1
    assert got.shape == (40, 1, 28, 28)
    want = torch.stack([ds[i][0] for i in range(40)])  # torchvision's [1, 28, 28] floats
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    assert labs.tolist() == labels.tolist()

    import torchvision.transforms.v2 as v2
    import torchvision.transforms.v2.functional as F

    steps = v2.Compose([v2.RandomCrop(24), v2.ColorJitter(0.4, 0.5, 0.6, 0.2), v2.ToDtype(torch.float32, scale=True)])
    with Loader(torchvision.datasets.MNIST(root, train=True), transform=steps, batch_size=8, device="cpu",
                shuffle=False, seed=3) as ld:
        keys, got, _ = _batches(ld)
        tf = ld.transform
    params = tf.make_params([(28, 28)] * 8, ld.seed, indices=range(8))  # (the first batch's draws)
    assert tf.native_spec is not None and got.shape == (40, 1, 24, 24)
    for k, p in enumerate(params):
        t, left, h, w = p["crop"]
        x = F.crop(torch.from_numpy(grey[k])[None].float() / 255, t, left, h, w)
        for op in p["order"]:
            name = ["brightness", "contrast", "saturation", "hue"][op]
            x = getattr(F, f"adjust_{name}")(x, p[name])
        assert (got[k] - x).abs().max() < 1e-5, (k, p)


@pytest.mark.parametrize("keep", [None, "ram"])
def test_mnist_padded_to_32_as_lenets_recipe_writes_it(mnist, keep):
    """LeNet-5's MNIST transform, `[Pad(2), ToTensor(), Normalize]` (a 32x32 input): each
    image is torchvision's ds[i], streamed and kept resident; a Pad of three different
    fills on one channel is refused, as torchvision refuses it."""
    root, _, labels = mnist
    tv = tvt.Compose([tvt.Pad(2), tvt.ToTensor(), tvt.Normalize((0.1307,), (0.3081,))])
    ds = torchvision.datasets.MNIST(root, train=True, transform=tv)
    with Loader(ds, batch_size=8, device="cpu", shuffle=False, **({} if keep is None else {"keep": keep})) as ld:
        keys, got, labs = _batches(ld)
        assert ld.transform.channels == 1 and ld.transform.plan.canvas is None
    assert got.shape == (40, 1, 32, 32) and labs.tolist() == labels.tolist()
    torch.testing.assert_close(got, torch.stack([ds[i][0] for i in range(40)]), atol=1e-6, rtol=0)
    bad = tvt.Compose([tvt.Pad(2, fill=(1, 2, 3)), tvt.ToTensor()])
    with pytest.raises(TransformError, match="fill of three different values"):
        Loader(torchvision.datasets.MNIST(root, train=True, transform=bad), batch_size=8, device="cpu")


@pytest.mark.parametrize("copied", [True, False], ids=["made-hwc-once", "each-image-transposed"])
def test_svhn_a_channels_first_array_with_labels(tmp_path, copied, monkeypatch):
    import gpudecode.vision_sets

    if not copied:
        monkeypatch.setattr(gpudecode.vision_sets, "_HWC_COPY", 0)
    scipy_io = pytest.importorskip("scipy.io")
    images, labels = _photos(30, 32, seed=2)
    labels = labels + 7  # 7..10: SVHN's file says 10 for the digit 0
    scipy_io.savemat(tmp_path / "train_32x32.mat", {"X": images.transpose(1, 2, 3, 0), "y": labels[:, None]})
    ds = StandInSVHN(str(tmp_path), split="train")
    assert ds.data.shape == (30, 3, 32, 32)
    with Loader(ds, batch_size=8, transform=None, device="cpu", shuffle=False) as ld:
        keys, got, labs = _batches(ld)
    assert torch.equal(got, torch.from_numpy(images).permute(0, 3, 1, 2))
    assert labs.tolist() == [int(ds[i][1]) for i in range(30)] == [y % 10 for y in labels.tolist()]


def test_a_set_whose_getitem_is_not_its_array_is_read_through_getitem(cifar):
    root, images, labels = cifar
    with Loader(Mirrored(root, train=True), batch_size=25, transform=None, device="cpu", shuffle=False) as ld:
        _, got, _ = _batches(ld)
    assert torch.equal(got, torch.from_numpy(images[:, :, ::-1].copy()).permute(0, 3, 1, 2))
    with Loader(Tensors(root, train=True), batch_size=25, transform=None, device="cpu", shuffle=False) as ld:
        _, got, labs = _batches(ld)
    assert torch.equal(got, torch.from_numpy(images).permute(0, 3, 1, 2)) and labs.tolist() == labels.tolist()


def test_a_target_transform_gives_the_labels_its_getitem_gives(cifar):
    """A target_transform, run once a label where labels are read from the set's array
    (its __getitem__ runs it on each item): the labels its items have."""
    root, images, labels = cifar
    ds = StandInCIFAR10(root, train=True, target_transform=lambda y: 9 - y)
    with Loader(ds, batch_size=25, transform=None, device="cpu", shuffle=False) as ld:
        keys, got, labs = _batches(ld)
        assert ld.dataset.targets == [ds[i][1] for i in range(len(ds))]
    assert "through its __getitem__" not in str(ld.describe()["file_sources"])  # (read from its array)
    assert labs.tolist() == [ds[i][1] for i in range(len(ds))] == (9 - labels).tolist()
    assert torch.equal(got, torch.from_numpy(images).permute(0, 3, 1, 2))


def test_made_lists_pickle_as_their_recipes_and_keep_ram_gives_the_streamed_batches(cifar):
    """A made list (an in-memory set, FakeData) pickles as the set it is made from, so
    Loader.dataset goes to spawned DataLoader workers; the set kept in RAM gives the
    streamed batches."""
    root, _, _ = cifar
    tf = T.Compose([T.RandomCrop(32, padding=4), T.RandomHorizontalFlip()])
    for ds in (StandInCIFAR10(root, train=True), torchvision.datasets.FakeData(12, (3, 40, 36), num_classes=3)):
        with Loader(ds, batch_size=8, transform=tf, device="cpu", seed=3) as ld:
            again = pickle.loads(pickle.dumps(ld.dataset))
            for i in (0, 5, len(ds) - 1):
                (a, la), (b, lb) = ld.dataset[i], again[i]
                assert la == lb and torch.equal(a, b)
    epochs = {}
    for keep in (None, "ram"):
        with Loader(StandInCIFAR10(root, train=True), batch_size=16, transform=tf, device="cpu", seed=5,
                    keep=keep) as ld:
            epochs[keep] = []
            for e in range(2):
                ld.set_epoch(e)
                epochs[keep].append(_batches(ld))
            if keep:
                assert ld.describe()["keep"]["tier"] == "ram"
    for (ka, a, la), (kb, b, lb) in zip(epochs[None], epochs["ram"]):
        assert ka == kb and torch.equal(a, b) and torch.equal(la, lb)


def test_a_one_value_normalize_is_torchvisions_broadcast():
    """Normalize((m,), (s,)) on an RGB image: torchvision broadcasts the one value over
    the three channels, and so does the converted step."""
    from gpudecode.errors import TransformError

    x = torch.randint(0, 256, (2, 3, 9, 11), dtype=torch.uint8)
    tv = tv2.Compose([tv2.ToDtype(torch.float32, scale=True), tv2.Normalize((0.1307,), (0.3081,))])
    ours = T.Compose.from_torchvision(tv)
    torch.testing.assert_close(ours(x), tv(x), atol=1e-5, rtol=0)
    assert T.Normalize(0.5, 0.25).mean == (0.5,) * 3 and T.Normalize([0.5], [0.25]).std == (0.25,) * 3
    with pytest.raises(TransformError, match="three means and three stds"):
        T.Normalize((0.5, 0.5), (0.2, 0.2))


def test_random_split_parts_and_subsets_are_their_sets_samples_at_their_indices(cifar, tmp_path):
    """torch's Subset (random_split's parts) of an in-memory set and of an ImageFolder: the
    Loader gives item k as the Subset gives it (the set's item indices[k]), nested Subsets
    too; a Subset's dataset view pickles; an index out of range, or a Subset of a set the
    Loader does not read, is refused when the Loader is made."""
    from torchvision.datasets import ImageFolder

    root, _, _ = cifar
    ds = StandInCIFAR10(root, train=True)
    part, rest = torch.utils.data.random_split(ds, [70, 30], generator=torch.Generator().manual_seed(0))
    inner = torch.utils.data.Subset(rest, [29, 0, 7, 7])  # nested, an index twice
    for sub in (part, inner):
        with Loader(sub, batch_size=16, transform=None, device="cpu", shuffle=False) as ld:
            _, got, labs = _batches(ld)
            again = pickle.loads(pickle.dumps(ld.dataset))
            assert torch.equal(again[1][0], got[1]) and again[1][1] == int(labs[1])
        assert len(got) == len(sub)
        for k in range(len(sub)):
            img, y = sub[k]
            assert int(labs[k]) == y and torch.equal(got[k], _pil_tensor(img)), k
    tree = tmp_path / "tree"
    images, labels = _photos(12, 40, seed=3)
    for k, (img, y) in enumerate(zip(images, labels)):
        (tree / f"class{y}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(tree / f"class{y}" / f"{k:02d}.png")
    folder = ImageFolder(str(tree))
    sub = torch.utils.data.Subset(folder, [11, 3, 5, 0])
    with Loader(sub, batch_size=4, transform=None, device="cpu", shuffle=False) as ld:
        _, got, labs = _batches(ld)
    for k in range(4):
        img, y = sub[k]
        assert int(labs[k]) == y and torch.equal(got[k], _pil_tensor(img)), k
    with pytest.raises(IndexError, match="index 100 is out of range"):
        Loader(torch.utils.data.Subset(ds, [0, 100]), batch_size=2, device="cpu")
    with pytest.raises(IndexError, match=r"index 12 is out of range for .*tree \(12 samples\)"):
        Loader(torch.utils.data.Subset(folder, [12]), batch_size=2, device="cpu")
    mine = torch.utils.data.Subset(Mine(), [3, 1])  # (a Subset of a set read through its __getitem__)
    with Loader(mine, batch_size=2, transform=None, device="cpu", shuffle=False) as ld:
        _, got, labs = _batches(ld)
    assert torch.equal(got, torch.stack([mine[0][0], mine[1][0]])) and labs.tolist() == [3, 1]


class Mine(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.full((3, 8, 8), 10 * i, dtype=torch.uint8), i


def test_a_tensor_dataset_of_uint8_images_in_any_layout(cifar):
    """TensorDataset(images, labels) of one's own: uint8 [N, 3, H, W], [N, H, W, 3] or grey
    [N, H, W] (said), each image and label the tensors' (a Subset of it too); floats, a
    third tensor or labels that are not one integer a sample are refused, saying what is
    read."""
    from torch.utils.data import Subset, TensorDataset

    _, images, labels = cifar
    chw = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
    y = torch.from_numpy(labels)
    for ds in (TensorDataset(chw, y), TensorDataset(torch.from_numpy(images), y), TensorDataset(chw)):
        with Loader(ds, batch_size=32, transform=None, device="cpu", shuffle=False, labels=len(ds.tensors) == 2) as ld:
            got, labs = [], []
            for b in ld:
                got.append(b.images.clone())
                labs.append(b.labels)
        assert torch.equal(torch.cat(got), chw)
        assert torch.equal(torch.cat(labs), y) if len(ds.tensors) == 2 else all(lab is None for lab in labs)
    with Loader(Subset(TensorDataset(chw, y), [9, 2]), batch_size=2, transform=None, device="cpu",
                shuffle=False) as ld:
        _, got, labs = _batches(ld)
    assert torch.equal(got, chw[[9, 2]]) and labs.tolist() == [labels[9], labels[2]]
    grey = chw[:, 0]
    with Loader(TensorDataset(grey, y), batch_size=50, transform=None, device="cpu", shuffle=False) as ld:
        _, got, _ = _batches(ld)
    assert torch.equal(got, grey[:, None])  # (one channel, as the set holds them)
    with pytest.warns(RuntimeWarning, match=r"TensorDataset\(100 images of 32x32\)'s images are grey and other "
                                            r"sources' have 3 channels"):
        ld = Loader([TensorDataset(grey, y), TensorDataset(chw[:50], y[:50])], batch_size=50, transform=None,
                    device="cpu", shuffle=False)
    with ld:
        _, got, _ = _batches(ld)
    assert torch.equal(got[:100], grey[:, None].expand(-1, 3, -1, -1)) and torch.equal(got[100:], chw[:50])
    # two TensorDatasets of one shape in a list: two lists, the second named by its place
    with Loader([TensorDataset(chw, y), TensorDataset(chw.flip(0), y.flip(0))], batch_size=50, transform=None,
                device="cpu", shuffle=False) as ld:
        _, got, labs = _batches(ld)
        assert ld.describe()["file_sources"] == ["TensorDataset(100 images of 32x32)",
                                                 "TensorDataset(100 images of 32x32, item 1 of the list)"]
    assert torch.equal(got, torch.cat([chw, chw.flip(0)])) and torch.equal(labs, torch.cat([y, y.flip(0)]))
    with pytest.raises(TypeError, match=r"this one holds 2 tensor\(s\), the first torch.float32 \[100, 3, 32, 32\] "
                                        r"\(floats: give the images as uint8"):
        Loader(TensorDataset(chw.float() / 255, y), batch_size=4, device="cpu")
    with pytest.raises(TypeError, match=r"holds 3 tensor\(s\)"):
        Loader(TensorDataset(chw, y, y), batch_size=4, device="cpu")
    with pytest.raises(TypeError, match=r"second tensor as one integer label a sample, not torch.float32 \[100, 2\]"):
        Loader(TensorDataset(chw, torch.zeros(100, 2)), batch_size=4, device="cpu")


class Flaky(Mirrored):
    """A set read through __getitem__ whose item 7 fails."""

    def __getitem__(self, i):
        if i == 7:
            raise OSError("the disk said no")
        return super().__getitem__(i)


def test_an_item_that_fails_is_its_own_error_named_and_passed_over(cifar):
    from gpudecode import ShardReadError

    root, images, _ = cifar
    with pytest.raises(ShardReadError, match=r"could not make the sample: OSError: the disk said no "
                                             r"\(shard 'Flaky\(100, train, in .*cifar[0-9]+\)/7', key '000000007'\)"):
        with Loader(Flaky(root, train=True), batch_size=10, transform=None, device="cpu", shuffle=False) as ld:
            list(ld)
    with pytest.warns(RuntimeWarning, match="the disk said no"):
        with Loader(Flaky(root, train=True), batch_size=10, transform=None, device="cpu", shuffle=False,
                    on_error="warn") as ld:
            keys, got, _ = _batches(ld)
            assert len(ld.skipped) == 1
    assert keys == [f"{i:09d}" for i in range(100) if i != 7]
    assert torch.equal(got, torch.from_numpy(np.delete(images, 7, 0)[:, :, ::-1].copy()).permute(0, 3, 1, 2))


def test_several_datasets_a_concat_dataset_and_a_mixture_of_them(cifar, tmp_path):
    """A list or a ConcatDataset of datasets (CIFAR10's two splits, an ImageFolder beside a
    shard) reads each with its own labels, as ConcatDataset gives them; an ImageFolder keeps
    its classes and keys (the same as its folder named); gpudecode.Source takes datasets,
    a label_offset reaching a made list's labels too; different transforms and no
    transform= are refused."""
    from torchvision.datasets import ImageFolder

    from gpudecode import Source

    root, images, labels = cifar
    train, test = StandInCIFAR10(root, train=True), StandInCIFAR10(root, train=False)
    concat = torch.utils.data.ConcatDataset([train, test])
    for spec in (concat, [train, test]):
        with Loader(spec, batch_size=22, transform=None, device="cpu", shuffle=False) as ld:
            _, got, labs = _batches(ld)
            assert ld.reader.classes == train.classes
        assert len(got) == len(concat) == 110
        for k in (0, 57, 99, 100, 109):
            img, y = concat[k]
            assert int(labs[k]) == y and torch.equal(got[k], _pil_tensor(img)), k
    tree = tmp_path / "tree"
    for k in range(6):
        (tree / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(images[k]).save(tree / f"c{k % 2}" / f"{k}.png")
    folder = ImageFolder(str(tree))
    with Loader(folder, batch_size=6, transform=None, device="cpu", shuffle=False) as a, \
            Loader(str(tree), batch_size=6, transform=None, device="cpu", shuffle=False) as b:
        (x,), (y,) = list(a), list(b)
        assert a.reader.classes == a.dataset.classes == folder.classes == ["c0", "c1"]
        assert x.keys == y.keys == ["c0/0", "c0/2", "c0/4", "c1/1", "c1/3", "c1/5"] and torch.equal(x.images, y.images)
    with pytest.raises(ValueError, match="same tree|named twice"):
        Loader([folder, str(tree)], batch_size=2, device="cpu")
    with Loader([Source(test, name="test"), Source(folder, label_offset=10, name="tree")], batch_size=16,
                transform=None, device="cpu", shuffle=False) as ld:
        got = {k: int(lab) for b in ld for k, lab in zip(b.keys, b.labels)}
    assert sorted(v for k, v in got.items() if "/" in k) == [10, 10, 10, 11, 11, 11]
    assert [got[f"{i:09d}"] for i in range(10)] == labels[:10].tolist()
    with Loader([Source(test, label_offset=5)], batch_size=10, transform=None, device="cpu", shuffle=False) as ld:
        (b,) = list(ld)
        again = pickle.loads(pickle.dumps(ld.dataset))
    assert b.labels.tolist() == (labels[:10] + 5).tolist() and again[3][1] == labels[3] + 5
    flipped = StandInCIFAR10(root, train=True, transform=tvt.RandomHorizontalFlip())
    with pytest.raises(TypeError, match="datasets with different transforms .*: give the one to run as transform="):
        Loader([test, flipped], batch_size=2, device="cpu")
    with Loader([test, flipped], batch_size=20, transform=T.Compose([T.Resize((8, 8))]), device="cpu") as ld:
        assert len(ld.dataset) == 110
    with pytest.raises(ValueError, match=r"'StandInCIFAR10\(10 images of 32x32, test, in .*\)' is named twice \(to "
                                         r"read a set more than once an epoch, give it once as gpudecode.Source"):
        Loader(torch.utils.data.ConcatDataset([test, StandInCIFAR10(root, train=False)]), batch_size=2, device="cpu")
    with Loader([Source(test, repeat=2)], batch_size=16, transform=None, device="cpu") as ld:  # (the way to)
        keys = [k for b in ld for k in b.keys]
    assert len(keys) == 20 and sorted(set(keys)) == [f"{i:09d}" for i in range(10)]


@pytest.mark.parametrize("copy_limit", [1 << 30, 0], ids=["made-hwc-once", "as-given"])
def test_every_layout_gives_pils_rgb_conversion(copy_limit, monkeypatch):
    """Property (hypothesis): for any array of images in any of the layouts read (HWC with 3
    or 1 channels, CHW with 3 or 1, grey; contiguous or a strided view), each image is what
    PIL's convert("RGB") makes of that image, and the set's labels its own."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    import gpudecode.vision_sets as vs

    monkeypatch.setattr(vs, "_HWC_COPY", copy_limit)

    @settings(max_examples=60, deadline=None)
    @given(n=st.integers(1, 4), h=st.integers(1, 9), w=st.integers(1, 9), layout=st.sampled_from(
        ["hwc3", "hwc1", "chw3", "chw1", "grey"]), view=st.booleans(), seed=st.integers(0, 2**32 - 1))
    def check(n, h, w, layout, view, seed):
        rng = np.random.default_rng(seed)
        c = 1 if layout in ("hwc1", "chw1", "grey") else 3
        hwc = rng.integers(0, 256, (n, h, w, c), dtype=np.uint8)
        if layout.startswith("chw"):
            arr = np.ascontiguousarray(hwc.transpose(0, 3, 1, 2))
            arr = arr if not view else np.ascontiguousarray(hwc.transpose(3, 0, 1, 2)).transpose(1, 0, 2, 3)
        elif layout == "grey":
            arr = hwc[..., 0] if view else np.ascontiguousarray(hwc[..., 0])
        else:
            arr = hwc if not view else np.ascontiguousarray(hwc.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)
        labels = rng.integers(0, 10, n)
        kind = "grey" if layout == "grey" else layout[:3]
        images = vs._ArrayImages(arr, kind, labels)
        for i in range(n):
            pil = Image.fromarray(hwc[i, :, :, 0] if c == 1 else hwc[i])
            assert np.array_equal(images.pixels(i), np.asarray(pil.convert("RGB"))), (layout, view, i)
            data, label = images(i)
            assert label == labels[i] and np.array_equal(np.load(io.BytesIO(data)), images.pixels(i))

    check()


def test_the_dataset_views_targets_are_the_labels_the_loader_trains_on(cifar, tmp_path):
    """loader.dataset.targets as torchvision's sets give `targets`: CIFAR10's and an
    ImageFolder's their own; shards' read from their .cls members (tarfile's reference),
    a mixture's label_offset added; a sample without a label named; labels=False has none."""
    import tarfile

    from torchvision.datasets import ImageFolder

    from gpudecode import LabelError, Source

    root, images, labels = cifar
    ds = StandInCIFAR10(root, train=True)
    with Loader(ds, batch_size=8, device="cpu", transform=None) as ld:
        assert ld.dataset.targets == ds.targets
    tree = tmp_path / "tree"
    for k in range(5):
        (tree / f"c{k % 3}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(images[k]).save(tree / f"c{k % 3}" / f"{k}.png")
    with Loader(ImageFolder(str(tree)), batch_size=8, device="cpu", transform=None) as ld:
        assert ld.dataset.targets == ImageFolder(str(tree)).targets == [0, 0, 1, 1, 2]
    shards = [make_shard(tmp_path / f"s-{j}.tar", [{"__key__": f"k{j}-{i}", "png": encode(images[i], "PNG"),
                                                   "cls": str((i * 7 + j) % 10).encode()} for i in range(9 + j)])
              for j in range(3)]
    want = []
    for s in shards:
        with tarfile.open(s) as tf:
            want += [int(tf.extractfile(m).read()) for m in tf if m.name.endswith(".cls")]
    with Loader(shards, batch_size=8, device="cpu", transform=None) as ld:
        assert ld.dataset.targets == want and len(want) == len(ld.dataset) == 30
        assert pickle.loads(pickle.dumps(ld.dataset)).targets == want  # (kept, and pickled with it)
    with Loader([Source(shards[:1]), Source(shards[1:], label_offset=10)], batch_size=8, device="cpu",
                transform=None) as ld:
        assert ld.dataset.targets == want[:9] + [v + 10 for v in want[9:]]
    bare = make_shard(tmp_path / "bare.tar", [{"__key__": "a", "png": encode(images[0], "PNG"), "cls": b"1"},
                                             {"__key__": "b", "png": encode(images[1], "PNG")}])
    with Loader(bare, batch_size=2, device="cpu", transform=None) as ld:
        with pytest.raises(LabelError, match=r"no label .*key 'b'"):
            print(ld.dataset.targets)
    with Loader(bare, batch_size=2, device="cpu", transform=None, labels=False) as ld:
        with pytest.raises(ValueError, match="reads no labels"):
            print(ld.dataset.targets)


def _food101(root, images, labels, classes=("apple_pie", "baklava", "churros")):
    """Food-101's layout (meta/train.json: {class: [class/image id]}, images/class/id.jpg)."""
    import json

    meta = {c: [] for c in classes}
    for k, (img, y) in enumerate(zip(images, labels)):
        c = classes[y % len(classes)]
        (root / "food-101" / "images" / c).mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(root / "food-101" / "images" / c / f"{k}.jpg", quality=90)
        meta[c].append(f"{c}/{k}")
    (root / "food-101" / "meta").mkdir(parents=True)
    (root / "food-101" / "meta" / "train.json").write_text(json.dumps(meta))


def test_sets_of_files_named_in_private_lists_food101_and_oxford_pets(cifar, tmp_path):
    """torchvision's Food101 and OxfordIIITPet on files in their layouts (loaded by their own
    classes): read from their files as an ImageFolder is (keys, classes, targets), every
    image and label their __getitem__'s; a target type that is not one integer, a set that
    changes its items, or a file gone, refused by name."""
    from torchvision.datasets import Food101, OxfordIIITPet

    from gpudecode import ShardReadError

    _, images, labels = cifar
    _food101(tmp_path / "f", images[:12], labels[:12])
    food = Food101(str(tmp_path / "f"), split="train")
    pets_root = tmp_path / "p" / "oxford-iiit-pet"
    (pets_root / "images").mkdir(parents=True)
    (pets_root / "annotations").mkdir()
    lines = []
    for k in range(8):
        breed = ["Abyssinian", "beagle"][k % 2]
        Image.fromarray(images[20 + k]).save(pets_root / "images" / f"{breed}_{k}.jpg", quality=90)
        lines.append(f"{breed}_{k} {k % 2 + 1} {k % 2 + 1} 1")
    (pets_root / "annotations" / "trainval.txt").write_text("\n".join(lines) + "\n")
    pets = OxfordIIITPet(str(tmp_path / "p"))
    for ds in (food, pets):
        with Loader(ds, batch_size=5, transform=None, device="cpu", shuffle=False) as ld:
            _, got, labs = _batches(ld)
            assert ld.dataset.classes == ds.classes and ld.dataset.targets == [ds[i][1] for i in range(len(ds))]
        assert len(got) == len(ds)
        for k in range(len(ds)):
            img, y = ds[k]
            assert int(labs[k]) == y and torch.equal(got[k], _pil_tensor(img)), (type(ds).__name__, k)
    with pytest.raises(TypeError, match=r"reads a OxfordIIITPet as \(image, label\) items: item 0 is \(Image, "
                                        r"tuple\), not \(an image, an integer label\)"):
        Loader(OxfordIIITPet(str(tmp_path / "p"), target_types=["category", "binary-category"]), batch_size=2,
               device="cpu")

    class Darker(Food101):
        def __getitem__(self, i):
            img, y = super().__getitem__(i)
            return img.point(lambda v: v // 2), y

    darker = Darker(str(tmp_path / "f"))
    with Loader(darker, batch_size=5, transform=None, device="cpu", shuffle=False) as ld:
        _, got, labs = _batches(ld)
        assert ld.describe()["file_sources"] == [f"Darker(12, read through its __getitem__: its items are not its "
                                                 f"files' images with their labels, in {food.root})"]
    for k in range(len(darker)):
        img, y = darker[k]
        assert int(labs[k]) == y and torch.equal(got[k], _pil_tensor(img))
    os.remove(food._image_files[0])
    with pytest.raises(ShardReadError, match=r"Food101's item 0 cannot be read: FileNotFoundError") as e:
        Loader(Food101(str(tmp_path / "f")), batch_size=2, device="cpu")
    assert e.value.shard == os.fspath(food._image_files[0])
