"""Issue 57's fourth hostile pass (the new surfaces), a test for each fault fixed so far,
each failing on the commit before its fix: labels that a label_offset moves out of range
(checked after the offset, where it is given, naming it), two sources whose classes would
share labels (refused when the Loader is made), and an offset past int64."""
from __future__ import annotations

import warnings

import pytest
import torch

from gpudecode import DecodeError, LabelError, Loader, ShardReadError, Source
from gpudecode import transforms as T

from conftest import encode, make_shard

KW = dict(batch_size=4, device="cpu", num_workers=1, seed=0, shuffle=False)


def _tf():
    return T.Compose([T.CenterCrop(24), T.ToDtype(torch.float32, scale=True)])


def _shard(path, photos, labels, prefix=""):
    return make_shard(path, [{"__key__": f"{prefix}{k:03d}", "jpg": encode(photos["coffee"][:40, :40]),
                              "cls": str(v).encode()} for k, v in enumerate(labels)])


def _tree(root, photos, classes):
    for c in classes:
        (root / c).mkdir(parents=True)
        for k in range(2):
            (root / c / f"{k}.png").write_bytes(encode(photos["rocket"][k:k + 30, :30], "PNG"))
    return str(root)


def test_two_trees_without_label_offset_are_refused_when_the_loader_is_made(tmp_path, photos):
    a = _tree(tmp_path / "a", photos, ["cat", "dog"])
    b = _tree(tmp_path / "b", photos, ["car", "plane"])
    with pytest.raises(ValueError, match="label 0 is class 'cat' in one source and 'car' in .*label_offset"):
        Loader([Source(a), Source(b)], transform=_tf(), **KW)
    with pytest.raises(ValueError, match="label 1 is class 'dog' in one source and 'car'.*label_offset"):
        Loader([Source(a), Source(b, label_offset=1)], transform=_tf(), **KW)  # too small an offset
    with Loader([Source(a), Source(b, label_offset=2)], transform=_tf(), **KW) as ld:
        assert ld.reader.classes == ["cat", "dog", "car", "plane"]
        assert sorted(int(v) for b in ld for v in b.labels) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_a_negative_label_offset_on_shards_is_each_samples_label_error(tmp_path, photos):
    shard = _shard(tmp_path / "s.tar", photos, [0, 1, 2, 3, 4])
    with Loader([Source(shard, label_offset=-3)], transform=_tf(), **KW) as ld, pytest.raises(LabelError) as e:
        list(ld)
    assert e.value.key == "000" and "label 0 + its source's label_offset -3 = -3 is negative" in str(e.value)
    with Loader([Source(shard, label_offset=-3)], transform=_tf(), on_error="skip", **KW) as ld:
        labels = [int(v) for b in ld for v in b.labels]
        assert sorted(s.key for s in ld.skipped) == ["000", "001", "002"]
    assert labels == [0, 1]


def test_num_classes_bounds_the_labels_after_their_offset(tmp_path, photos):
    shard = _shard(tmp_path / "s.tar", photos, [0, 1, 2, 3, 4])
    with Loader([Source(shard, label_offset=5)], transform=_tf(), num_classes=5, **KW) as ld, \
            pytest.raises(LabelError, match=r"label 0 \+ its source's label_offset 5 = 5 is not below num_classes=5"):
        list(ld)
    with Loader([Source(shard, label_offset=5)], transform=_tf(), num_classes=10, **KW) as ld:
        assert [int(v) for b in ld for v in b.labels] == [5, 6, 7, 8, 9]


def test_a_tree_whose_offset_moves_every_label_out_of_range_is_refused_not_skipped(tmp_path, photos):
    tree = _tree(tmp_path / "t", photos, ["cat", "dog"])
    with pytest.raises(ValueError, match=r"label_offset=9 makes its labels 9\.\.10, not below num_classes=10"):
        Loader([Source(tree, label_offset=9)], transform=_tf(), num_classes=10, on_error="skip", **KW)
    with pytest.raises(ValueError, match=r"label_offset=-1 makes its labels -1\.\.0, negative"):
        Loader([Source(tree, label_offset=-1)], transform=_tf(), on_error="skip", **KW)


def test_a_label_offset_past_int64_is_refused_where_it_is_given(tmp_path, photos):
    with pytest.raises(ValueError, match=r"label_offset must be within \+-2\*\*62"):
        Source("x.tar", label_offset=1 << 63)


def test_the_native_label_path_and_the_checked_one_agree_with_mixed_offsets(tmp_path, photos):
    """Shards with and without an offset in one batch: each label checked with its own
    offset (the native fast path takes a batch whose labels fit with every offset)."""
    a = _shard(tmp_path / "a.tar", photos, [0, 1, 2])
    b = _shard(tmp_path / "b.tar", photos, [0, 1, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with Loader([Source(a), Source(b, label_offset=3)], transform=_tf(), num_classes=6,
                    **dict(KW, batch_size=6)) as ld:
            assert sorted(int(v) for b in ld for v in b.labels) == [0, 1, 2, 3, 4, 5]
        with Loader([Source(a), Source(b, label_offset=4)], transform=_tf(), num_classes=6, on_error="skip",
                    **dict(KW, batch_size=6)) as ld:
            got = sorted(int(v) for b in ld for v in b.labels)
            assert [s.key for s in ld.skipped] == ["002"] and got == [0, 1, 2, 4, 5]


@pytest.mark.filterwarnings("ignore:even=:RuntimeWarning")
def test_split_shard_with_fewer_shards_than_ranks_is_refused_when_made(tmp_path, photos):
    shards = [_shard(tmp_path / f"s{j}.tar", photos, [0, 1]) for j in range(4)]
    with pytest.raises(ValueError, match=r"split='shard' gives each of the 5 consumers .* whole shards, and there are "
                                         r"4: some would read nothing\. Use split='sample' or 'elastic'"):
        Loader(shards, transform=_tf(), split="shard", rank=4, world_size=5, on_error="skip", **KW)
    with Loader(shards, transform=_tf(), rank=4, world_size=5, **KW) as ld:  # auto: by sample, every rank fed
        assert len(ld) == 1 and sum(len(b.keys) for b in ld) == 2


def _state_after_one_batch(shard):
    with Loader(shard, transform=_tf(), **KW) as ld:
        it = iter(ld)
        next(it)
        state = ld.state_dict()
        it.close()
    return state


@pytest.mark.parametrize("change, message", [
    (lambda s: s["dataset_state"].update(position=10**12), "position 1000000000000 is past the 8 samples"),
    (lambda s: s["dataset_state"].update(position=3.7), "'position' must be a whole number >= 0, not 3.7"),
    (lambda s: s["dataset_state"].update(position=-1), "'position' must be a whole number >= 0, not -1"),
    (lambda s: s["dataset_state"].pop("epoch"), "has no 'epoch': it is not a whole Loader.state_dict"),
    (lambda s: s.update(_iterator_finished="yes"), "'_iterator_finished' must be True or False"),
    (lambda s: s["dataset_state"].update(position=True), "must be a whole number >= 0, not True"),
])
def test_a_saved_state_is_checked_field_by_field(tmp_path, photos, change, message):
    shard = _shard(tmp_path / "s.tar", photos, list(range(8)))
    state = _state_after_one_batch(shard)
    change(state)
    with Loader(shard, transform=_tf(), **KW) as ld, pytest.raises(ValueError, match=message):
        ld.load_state_dict(state)


def test_a_resume_with_a_changed_transform_has_a_way_out(tmp_path, photos):
    shard = _shard(tmp_path / "s.tar", photos, list(range(8)))
    state = _state_after_one_batch(shard)
    other = T.Compose([T.CenterCrop(24), T.RandomHorizontalFlip(), T.ToDtype(torch.float32, scale=True)])
    with Loader(shard, transform=other, **KW) as ld:
        with pytest.raises(ValueError, match=r"other transforms.*strict=False"):
            ld.load_state_dict(state)
        ld.load_state_dict(state, strict=False)
        assert [k for b in ld for k in b.keys] == [f"{k:03d}" for k in range(4, 8)]


@pytest.mark.parametrize("make, message", [
    (lambda: T.RandomZoomOut(side_range=(1.0, float("inf"))), "Invalid side range"),
    (lambda: T.RandomZoomOut(side_range=(float("nan"), 2.0)), "Invalid side range"),
    (lambda: T.RandomRotation(float("nan"), expand=True), "degrees must be finite numbers"),
    (lambda: T.RandomRotation((0.0, float("inf"))), "degrees must be finite numbers"),
    (lambda: T.ElasticTransform(sigma=float("inf")), "sigma must be finite numbers"),
    (lambda: T.ElasticTransform(alpha=float("nan")), "alpha must be finite numbers"),
])
def test_nan_and_infinite_arguments_are_refused_at_construction(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_an_elastic_blur_too_large_for_the_output_is_refused_at_construction():
    from gpudecode import TransformError

    with pytest.raises(TransformError, match=r"kernel of 41: a 16x16 image is too small"):
        T.Compose([T.RandomResizedCrop(16), T.ElasticTransform(sigma=5.0)])
    T.Compose([T.RandomResizedCrop(64), T.ElasticTransform(sigma=5.0)])  # (large enough: taken)


def _wide_shard(tmp_path, photos):
    import io

    import numpy as np
    from PIL import Image

    wide = (np.random.default_rng(0).random((1, 65000, 3)) * 255).astype(np.uint8)
    b = io.BytesIO()
    Image.fromarray(wide).save(b, format="PNG")
    return make_shard(tmp_path / "wide.tar", [{"__key__": "wide", "png": b.getvalue(), "cls": b"1"},
                                              {"__key__": "ok", "jpg": encode(photos["coffee"][:60, :60]),
                                               "cls": b"1"}])


@pytest.mark.parametrize("first", ["rotation", "elastic"])
def test_an_image_whose_aspect_makes_the_transform_impossible_is_its_own_error(tmp_path, photos, first):
    """A 65,000x1 image under a canvas step: that sample's error (was: a MemoryError asking
    for tens of GB, or one image's ValueError failing the batch)."""
    step = T.RandomRotation(45, expand=True) if first == "rotation" else T.ElasticTransform()
    tf = T.Compose([step, T.RandomResizedCrop(32)])
    with Loader(_wide_shard(tmp_path, photos), transform=tf, on_error="skip", **KW) as ld:
        keys = [k for b in ld for k in b.keys]
        assert [s.key for s in ld.skipped] == ["wide"]
        assert "the transform cannot take this image of 1x65000" in ld.skipped[0].reason
    assert keys == ["ok"]


@pytest.mark.parametrize("module, argv", [
    ("gpu", ["--batch-sizes", "abc"]), ("gpu", ["--engine-threads", "2,,4"]), ("reader", ["--shards", "0"]),
    ("kernels", ["--images", "0"]), ("resident", ["--cifar", "-1"]),
])
def test_the_bench_scripts_refuse_bad_counts_as_usage_errors(module, argv, capsys):
    import importlib

    main = importlib.import_module(f"gpudecode.bench.suite.{module}").main
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and f"argument {argv[0]}" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["plan", "--cost", "jpg:100:1", "--rate", "1000", "--storage", "", "--gpus", "8"], "no storage tier to plan"),
    (["plan", "--cost", "jpg:100:1", "--step-ms", "1e300", "--batch", "1", "--gpus", "8"], "must be within"),
    (["plan", "--cost", "jpg:100:1", "--step-ms", "1e-7", "--batch", "100000", "--gpus", "8"], "must be within"),
])
def test_plan_refuses_what_it_cannot_plan_in_a_sentence(argv, message, capsys):
    from gpudecode.cli import main

    assert main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bench_train_workers_and_formats_on_a_missing_gpu(tmp_path, capsys):
    from gpudecode.cli import main

    with pytest.raises(SystemExit) as e:
        main(["bench", "train", str(tmp_path), "--workers", "abc"])
    assert e.value.code == 2 and "argument --workers: 'abc' is not a whole number" in capsys.readouterr().err
    assert main(["bench", "make-data", str(tmp_path / "d"), "--count", "2", "--quiet"]) == 0
    if not torch.cuda.is_available():
        assert main(["bench", "formats", str(tmp_path / "d"), "--device", "cuda", "--out", str(tmp_path / "o")]) == 1
        assert "torch sees no CUDA device" in capsys.readouterr().err


def test_timm_nearest_is_pils_nearest(photos):
    """timm's create_transform(interpolation="nearest") resizes PIL images with PIL's
    NEAREST: converted as "pil-nearest", Pillow's pixel exactly (ATen's legacy nearest was
    47-70% of values more than a level off; torch's nearest-exact 2.7% of them)."""
    timm = pytest.importorskip("timm")
    import numpy as np
    from PIL import Image

    tt = timm.data.create_transform(64, is_training=True, interpolation="nearest")
    tf = T.Compose.from_torchvision(tt)
    rrc = tf.plan.geometry[0]
    assert rrc.interpolation == "pil-nearest"
    img = photos["astronaut"][:300, :400]
    ours = T.Compose([T.Resize((123, 177), interpolation="pil-nearest")])(
        torch.from_numpy(img).permute(2, 0, 1).contiguous()).permute(1, 2, 0).numpy()
    pil = np.asarray(Image.fromarray(img).resize((177, 123), Image.Resampling.NEAREST))
    assert np.array_equal(ours, pil)
    tt = timm.data.create_transform(64, is_training=False, interpolation="nearest", crop_pct=0.875)
    tf = T.Compose.from_torchvision(tt)
    assert tf.plan.resample == 4
    timm_out = tt(Image.fromarray(img)).numpy()
    ours = tf([torch.from_numpy(img).permute(2, 0, 1).contiguous()], tf.make_params([img.shape[:2]], 0))[0].numpy()
    assert np.abs(ours - timm_out).max() <= 1e-5  # (normalized floats: the same pixels, to float rounding)


@pytest.mark.filterwarnings("ignore:even=:RuntimeWarning")
def test_an_elastic_state_resumes_on_another_world_size_with_the_default_even(tmp_path, photos):
    """The README's promise: a state saved by a job of any world size resumes with
    split="elastic"; 1 -> 2 and 2 -> 1 ranks with the default even were refused (None
    against "pad"): the even policy goes with the world size, as the batch size does."""
    shards = [_shard(tmp_path / f"s{j}.tar", photos, list(range(10)), prefix=f"s{j}-") for j in range(3)]
    kw = dict(KW, split="elastic", shuffle=True)
    with Loader(shards, transform=_tf(), **kw) as ld:  # one rank: even None
        every = [k for b in ld for k in b.keys]
    with Loader(shards, transform=_tf(), **kw) as ld:
        it = iter(ld)
        first = [k for _ in range(2) for k in next(it).keys]
        state = ld.state_dict()
        it.close()
    rest = []
    for rank in range(2):  # two ranks: even "pad"
        with Loader(shards, transform=_tf(), rank=rank, world_size=2, **kw) as ld:
            ld.load_state_dict(state)
            rest += [k for b in ld for k in b.keys]
    assert set(first) | set(rest) == set(every) and not set(first) & set(rest)
    with Loader(shards, transform=_tf(), rank=1, world_size=2, **kw) as ld:  # and back: 2 -> 1
        it = iter(ld)
        next(it)
        state = ld.state_dict()
        it.close()
    with Loader(shards, transform=_tf(), **kw) as ld:
        ld.load_state_dict(state)
        assert len([k for b in ld for k in b.keys]) > 0


@pytest.mark.parametrize("kw, message", [
    (dict(epoch_size=10**12), r"epoch_size must be an int in 1\.\.1,000,000,000"),
    (dict(epoch_size=0), "epoch_size must be an int"),
    (dict(epoch_size=-5), "epoch_size must be an int"),
    (dict(epoch_size="all_exausted"), "epoch_size must be an int .* or one of"),
    (dict(zero=True), "the sources' weights sum to 0"),
])
def test_a_mixtures_epoch_is_checked_where_it_is_given(tmp_path, photos, kw, message):
    a = _shard(tmp_path / "a.tar", photos, [0, 1], prefix="a")
    b = _shard(tmp_path / "b.tar", photos, [0, 1], prefix="b")
    w = 0.0 if kw.pop("zero", False) else 1.0
    with pytest.raises(ValueError, match=message):
        Loader([Source(a, weight=w), Source(b, weight=w)], transform=_tf(), **KW, **kw)


def test_a_huge_repeated_augs_is_refused_where_it_is_given(tmp_path, photos):
    tree = _tree(tmp_path / "t", photos, ["cat", "dog"])
    with pytest.raises(ValueError, match=r"repeated_augs must be an int in 1\.\.256"):
        Loader(tree, transform=_tf(), repeated_augs=10**9, **KW)


def test_a_negative_epoch_is_refused_and_every_repeat_zero_is_an_empty_epoch(tmp_path, photos):
    shard = _shard(tmp_path / "s.tar", photos, [0, 1, 2, 3])
    with Loader(shard, transform=_tf(), **KW) as ld:
        with pytest.raises(ValueError, match="epoch must be a whole number >= 0, not -1"):
            ld.set_epoch(-1)
        ld.set_epoch(10**30)  # (any whole number >= 0: its draws are a hash of it)
        assert len([k for b in ld for k in b.keys]) == 4
    with Loader([Source(shard, repeat=0)], transform=_tf(), **KW) as ld:
        assert len(ld) == 0 and list(ld) == []


@pytest.mark.parametrize("name, points", [
    ("sampler", "shuffle= and seed="), ("collate_fn", "batch_transform="), ("batch_sampler", "batch_size"),
    ("worker_init_fn", "threads of this process"), ("generator", "seed="),
])
def test_dataloader_only_arguments_are_refused_with_the_loaders_way(tmp_path, photos, name, points):
    """Issue 58, item 5: DataLoader's arguments the Loader does not take name what it does
    instead, in a whole sentence (was: Python's 'unexpected keyword argument')."""
    shard = _shard(tmp_path / "s.tar", photos, [0, 1])
    with pytest.raises(TypeError, match=rf"Loader\(\) takes no {name}= \(a DataLoader argument\): .*{points}") as e:
        Loader(shard, transform=_tf(), **KW, **{name: None})
    assert str(e.value).endswith(".")
    with pytest.raises(TypeError, match="unexpected keyword argument 'batchsize'"):
        Loader(shard, transform=_tf(), batchsize=2, **KW)


def test_an_image_folder_dataset_is_taken_as_it_is(tmp_path, photos):
    """Issue 58, item 4: Loader(ImageFolder(root, transform)) reads the dataset's own samples
    (classes, extensions and is_valid_file applied) with its transform: the batches of the
    Loader given the folder and the transform (was: TypeError, expected str ... not tuple)."""
    import torchvision
    import torchvision.transforms.v2 as v2

    tree = _tree(tmp_path / "t", photos, ["cat", "dog", "emu"])
    tv = v2.Compose([v2.ToImage(), v2.CenterCrop(24), v2.ToDtype(torch.float32, scale=True)])
    ds = torchvision.datasets.ImageFolder(tree, transform=tv)
    with Loader(ds, **KW) as ld:
        got = [(list(b.keys), b.images.clone(), b.labels.clone()) for b in ld]
    with Loader(tree, transform=tv, **KW) as ld:
        want = [(list(b.keys), b.images.clone(), b.labels.clone()) for b in ld]
    assert len(got) == len(want) == 2
    for (gk, gi, gl), (wk, wi, wl) in zip(got, want):  # (keys: the files' paths, whole here, from the root there)
        assert [k.rsplit("/", 2)[-2:] for k in gk] == [k.split("/") for k in wk]
        assert torch.equal(gi, wi) and torch.equal(gl, wl)
    assert sorted(int(v) for _, _, lab in got for v in lab) == [0, 0, 1, 1, 2, 2]
    only_dogs = torchvision.datasets.ImageFolder(tree, transform=tv, is_valid_file=lambda p: "/dog/" in p,
                                                 allow_empty=True)
    with Loader(only_dogs, **KW) as ld:
        assert sorted(int(v) for b in ld for v in b.labels) == [1, 1]  # (its own choice of files kept)


def test_torchvisions_fakedata_is_taken_as_it_is():
    """Issue 58, item 4 (`--dummy`): Loader(FakeData(...)) gives FakeData's own images (its
    per-index draws) through its transform, with its labels, split over ranks like any
    list; made on the reader threads, a million samples kept as no million strings."""
    import torchvision
    import torchvision.transforms as v1

    ds = torchvision.datasets.FakeData(30, (3, 20, 26), 7, v1.ToTensor(), random_offset=5)
    seen = {}
    for rank in range(2):
        with Loader(ds, batch_size=4, rank=rank, world_size=2, shuffle=True, seed=1, device="cpu") as ld:
            for b in ld:
                for k, img, lab in zip(b.keys, b.images, b.labels):
                    seen[int(k)] = (img, int(lab))
    assert sorted(seen) == list(range(30))
    for i in range(30):
        want, label = ds[i]
        torch.testing.assert_close(seen[i][0], want, atol=1e-6, rtol=0)  # (x * (1/255) against x / 255)
        assert seen[i][1] == label
    big = torchvision.datasets.FakeData(1281167, (3, 224, 224), 1000, v1.ToTensor())
    with Loader(big, batch_size=256, device="cpu") as ld:
        assert len(ld) == 1281167 // 256 + 1 and ld.dataset[1281166][1] == big[1281166][1]


def test_a_dataset_the_loader_cannot_read_is_refused_with_what_it_reads(tmp_path, photos):
    """A Dataset read through its __getitem__ whose items are not uint8 images (floats: a
    transform ran under another name), one with no length, an IterableDataset, and a
    target_transform that does not make an integer label: each refused, saying what."""
    import torchvision

    class Mine(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return torch.zeros(3, 8, 8), 0

    class Endless(torch.utils.data.Dataset):
        def __getitem__(self, i):
            return torch.zeros(3, 8, 8, dtype=torch.uint8), 0

    class OneHot(torch.utils.data.Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            from PIL import Image

            return Image.fromarray(photos["rocket"][:30, :30]), torch.eye(2)[i % 2]

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter([])

    with pytest.raises(TypeError, match=r"reads a Mine as \(image, label\) items: item 0 is \(Tensor float32 "
                                        r"\[3, 8, 8\], int\), not .* \(float pixels: .*must go\)"):
        Loader(Mine(), transform=_tf(), **KW)
    with pytest.raises(TypeError, match="needs its length: this Endless has no __len__"):
        Loader(Endless(), transform=_tf(), **KW)
    with pytest.raises(TypeError, match=r"not an IterableDataset \(Stream\): give its shards"):
        Loader(Stream(), transform=_tf(), **KW)
    with pytest.raises(TypeError, match=r"reads images held in one Tensor as torch.utils.data.TensorDataset"):
        Loader(torch.zeros(4, 3, 8, 8, dtype=torch.uint8), transform=_tf(), **KW)
    with pytest.raises(TypeError, match="not a value of type int"):
        Loader(5, transform=_tf(), **KW)
    import datasets

    splits = datasets.DatasetDict({"train": datasets.Dataset.from_dict({"label": [0]}),
                                   "test": datasets.Dataset.from_dict({"label": [1]})})
    with pytest.raises(TypeError, match=r"one split of a Hugging Face DatasetDict: give ds\['train'\] \(its splits: "
                                        r"train, test\)"):
        Loader(splits, transform=_tf(), **KW)
    tree = _tree(tmp_path / "t", photos, ["cat", "dog"])
    one_hot = torchvision.datasets.ImageFolder(tree, target_transform=lambda y: torch.eye(2)[y])
    with pytest.raises(TypeError, match=r"ImageFolder's target_transform makes label 0 Tensor float32 \[2\], not an "
                                        "integer"):
        Loader(one_hot, transform=_tf(), **KW)
    with pytest.raises(TypeError, match=r"item 0 is \(Image, Tensor float32 \[2\]\), not \(an image, an integer "
                                        r"label\)"):
        Loader(OneHot(), transform=_tf(), **KW)
    with pytest.raises(ShardReadError, match=r"FakeData's item 0 cannot be read: RuntimeError: .*Scalar") as e:
        Loader(torchvision.datasets.FakeData(size=4, target_transform=lambda y: torch.eye(10)[y]), transform=_tf(),
               **KW)
    assert e.value.shard.startswith("FakeData(4, ")


def test_repeated_augs_says_when_it_changes_an_epochs_size(tmp_path, photos):
    """Issue 58, item 2: repeated_augs follows torchvision's RASampler exactly, whose epoch
    is floor(n / 256) * 256 / world_size samples a rank: said, not silent."""
    tree = _tree(tmp_path / "t", photos, ["cat", "dog"])  # 4 images: an epoch of 0 on one process
    with pytest.warns(RuntimeWarning, match=r"repeated_augs=3: each of the 1 consumers reads 0 samples an epoch "
                                            r"\(0 of the 4\)"):
        ld = Loader(tree, transform=_tf(), repeated_augs=3, **KW)
    assert len(ld) == 0
    ld.close()


def _said(err) -> str:
    """An error's message on one line (TransformError wraps it to 100 columns)."""
    return " ".join(str(err.value).split())


@pytest.mark.parametrize("steps, said", [
    ([T.CenterCrop(60000)], "CenterCrop(size=(60000, 60000)) makes outputs of 60000x60000 pixels "
                            "(3,600,000,000 an image, 10.1 GiB)"),
    ([T.RandomResizedCrop(50000)], "makes outputs of 50000x50000 pixels (2,500,000,000 an image, 7.0 GiB)"),
    ([T.Resize((20000, 20000)), T.ToDtype(torch.float32, scale=True)], "(400,000,000 an image, 4.5 GiB)"),
    ([T.RandomCrop(30000, pad_if_needed=True), T.RandomHorizontalFlip()], "outputs of 30000x30000 pixels")])
def test_an_output_over_the_pixel_limit_is_refused_when_the_compose_is_made(steps, said):
    """A size of the transform's own making over twice Pillow's bomb limit (the Loader's
    default max_pixels) is refused when the Compose is made, naming the step, the size and
    its bytes: before this, the first batch asked numpy or torch for GiBs it may not have."""
    with pytest.raises(T.TransformError) as e:
        T.Compose(steps)
    assert said in _said(e) and "over the limit of 178,956,970 pixels" in _said(e), _said(e)
    T.Compose([T.RandomResizedCrop(50000), T.CenterCrop(32)])  # (only a window of it made: allowed)


def test_an_output_that_the_images_make_too_large_is_refused_before_it_is_made():
    """`Pad(30000)` keeps each image's size, padded: a 64x64 image would give 60064x60064
    (40 GiB of float32): refused at the batch, before the allocation, as TransformError."""
    tf = T.Compose([T.Pad(30000), T.ToDtype(torch.float32, scale=True)])
    with pytest.raises(T.TransformError) as e:
        tf([torch.zeros(3, 64, 64, dtype=torch.uint8)])
    assert "outputs of 60064x60064 pixels (3,607,684,096 an image, 40.3 GiB), over the limit" in _said(e), _said(e)


def test_an_output_over_max_pixels_is_refused_when_the_loader_is_made(tmp_path, photos):
    """The Loader's max_pixels bounds what its transform makes as it bounds what it decodes:
    a size of the transform's own over it is refused when the Loader is made, naming the
    view and max_pixels (before this, each batch allocated it)."""
    shard = _shard(tmp_path / "s.tar", photos, [0, 1])
    with pytest.raises(T.TransformError) as e:
        Loader(shard, transform=T.Compose([T.CenterCrop(400)]), max_pixels=100_000, **KW)
    assert ("CenterCrop(size=(400, 400)) makes outputs of 400x400 pixels (160,000 an image, 0.5 MiB), over the limit "
            "of 100,000 pixels (max_pixels): raise the Loader's max_pixels") in _said(e), _said(e)
    views = [T.Compose([T.CenterCrop(24)]), T.Compose([T.RandomResizedCrop(320)])]
    with pytest.raises(T.TransformError) as e:
        Loader(shard, transform=views, max_pixels=100_000, **KW)
    assert _said(e).startswith("view 1: RandomResizedCrop(size=(320, 320)") and "(max_pixels)" in _said(e), _said(e)
    Loader(shard, transform=views, max_pixels=320 * 320, **KW).close()


@pytest.mark.parametrize("keep", [None, "ram"])
def test_a_ragged_output_over_max_pixels_is_its_samples_error(tmp_path, keep):
    """With ragged=True each image's output is its own: one that a Resize of its shorter side
    makes larger than max_pixels (a 64x664 strip under Resize(300): 300x3112) is its
    sample's DecodeError, named, as the plans of one size say it (before this it was made);
    skipped, the rest are the batches they are without the limit."""
    rng = torch.Generator().manual_seed(0)
    strips = [torch.randint(0, 256, (64, 64 + 200 * i, 3), dtype=torch.uint8, generator=rng).numpy() for i in range(4)]
    shard = make_shard(tmp_path / "s.tar", [{"__key__": f"k{i}", "jpg": encode(a, quality=95), "cls": b"0"}
                                            for i, a in enumerate(strips)])
    kw = {"batch_size": 2, "transform": T.Compose([T.Resize(300)], ragged=True), "device": "cpu", "shuffle": False,
          **({} if keep is None else {"keep": keep})}
    with pytest.raises(DecodeError) as e:
        list(Loader(shard, max_pixels=400_000, **kw))
    assert e.value.key == "k2" and e.value.shard == shard and "made 300x2175 by the transform: over the limit of " \
        "400000 pixels (max_pixels)" in str(e.value), str(e.value)
    ld = Loader(shard, max_pixels=400_000, on_error="skip", **kw)
    got = [(k, x) for b in ld for k, x in zip(b.keys, b.images)]
    assert [s.key for s in ld.skipped] == ["k2", "k3"] and [k for k, _ in got] == ["k0", "k1"]
    want = [(k, x) for b in Loader(shard, **kw) for k, x in zip(b.keys, b.images)]
    assert [k for k, _ in want] == ["k0", "k1", "k2", "k3"] and want[3][1].shape == (3, 300, 3112)
    assert all(torch.equal(x, y) for (_, x), (_, y) in zip(got, want[:2]))
