"""torchvision.transforms.v2-compatible transforms that run as one fused kernel.

The classes take torchvision's arguments and draw their parameters on the host with
torchvision's algorithms; `Compose` turns a supported sequence into one call of the
fused kernel (numba CUDA for CUDA tensors, the numba CPU twin otherwise). A sequence the
kernel cannot express is refused when the Compose is built, never approximated.

What fuses, by place in a Compose (written by `make ops-table` from the classes' declarations):
    - canvas (first, before the geometry): RandomZoomOut, Pad, ElasticTransform,
      RandomRotation (expand=True, or any where a geometry step follows it: the whole image
      rotated, then cropped; an exact quarter turn expanded, RandomRotation((90, 90),
      expand=True), also after a geometry that makes squares, as the turn it is there, and
      an exact half turn anywhere), RandomAffine, RandomPerspective (where a geometry step
      follows them; several in a row, each made of the one before, as torchvision warps a
      warped image: [RandomRotation(15), RandomAffine(0, translate=(0.1, 0.1)),
      RandomCrop(28, padding=2)]): each image made anew from the decoded one (a canvas),
      which a geometry step must follow (Pad before a RandomCrop folds into the crop's
      padding, and Pad with no geometry after it, or after Resize or RandomResizedCrop, is a
      window of the image padded: no canvas; its edge, reflect and symmetric modes only so);
      ElasticTransform also last, after the geometry and the per-sample ops (then only
      Normalize, ToDtype, RandomErasing), on the kernel's output
    - geometry (one, first or after the canvas): RandomResizedCrop, Resize, RandomResize,
      RandomShortestSize, ScaleJitter, CenterCrop, RandomCrop, RandomIoUCrop, FixedSizeCrop
      (the detection reference's), Resize + CenterCrop, CenterCrop or RandomCrop + Resize
      (the crop inside the image, or padded by a fill: RandomCrop(32, padding=4) +
      Resize(224), a Pad's canvas), RandomResizedCrop + CenterCrop or RandomCrop (a window
      of the resized crop, padded where it reaches past it), Pad alone, or after Resize or
      RandomResizedCrop, Resize + RandomResizedCrop or Resize (each image resized first, as
      torchvision resizes a uint8 image), Resize + RandomCrop or FixedSizeCrop
      (RandomResize, RandomShortestSize and ScaleJitter only so), RandomIoUCrop + Resize((h,
      w)) (its crop drawn from a Boxes field's boxes), Resize(int) alone (a batch of one
      output size), a crop of a crop (CenterCrop or RandomCrop, then an unpadded one no
      larger: one crop, the offsets added; a Resize before them), RandomChoice (or
      RandomApply) over those that give one size (each image its option's; a Resize or a
      canvas step before it, or crops after it that end each option:
      RandomChoice([Resize(256), Resize(320)]) + RandomCrop(224)), or none (a Resize to the
      size its input already has does nothing, as torchvision's); with Compose(ragged=True),
      images of their own sizes: also Resize(int), RandomResize, RandomShortestSize,
      ScaleJitter or RandomIoUCrop alone (bilinear or bicubic, antialiased, or nearest,
      nearest-exact, pil-nearest; a RandomCrop pads with a fill, the edge, or a reflection:
      every padding_mode); timm's RandomResizedCropAndInterpolation, ResizeKeepRatio,
      CenterCropOrPad
    - flips (any order; after the geometry, or first, before it): RandomHorizontalFlip,
      RandomVerticalFlip (first: flipped, then cropped, as torchvision's; not before a
      nearest resize; between an even Pad and a RandomCrop: before the Pad; between a Resize
      and the crop: before the Resize (a resize of a mirrored image is the mirrored resize);
      between a crop and its Resize: after the Resize; before an evenly padded Pad's canvas:
      the crop's window mirrored in it; before a warp's canvas ([flip, RandomRotation(10),
      Resize((224, 224))]): each flipped image flipped before its canvas is made; between a
      warp's canvas and the geometry: the crop's window mirrored in the canvas; between a
      RandomResizedCrop and a crop of its output: that crop's window mirrored; after
      torchvision's warps and policies: each warp mirrored where the sample is flipped, the
      same image)
    - per-sample ops (any order; also before the geometry): ColorJitter,
      RandomChannelPermutation, RandomPhotometricDistort, RandomGrayscale, Grayscale,
      RandomSolarize, RandomInvert, RandomPosterize, RandomAutocontrast, RandomEqualize,
      RandomAdjustSharpness, GaussianBlur, GaussianNoise, RandomRotation, RandomAffine,
      RandomPerspective (written before the geometry, they run first, on each whole image at
      its size, as torchvision runs them, and so do the policies and containers, on one
      channel after a Grayscale(1) or of a grey set's images; the warps there are canvas
      steps)
    - policies: TrivialAugmentWide, RandAugment, AutoAugment, AugMix; timm's RandAugment,
      AutoAugment, AugMixAugment (create_transform's rand-m9-mstd0.5-inc1, v0, augmix-m5-w3
      and the like)
    - containers: RandomApply, RandomChoice, RandomOrder over the per-sample ops (a Compose
      among their items: one item, its steps in order, as torchvision runs it; a Compose
      inside a Compose: its steps in its place); RandomChoice's options may draw alike (one
      of them draws an image: RandomChoice([RandomRotation((a, a)) for a in (0, 90, 180,
      270)])); several RandomChoices in a Compose (the second draws under "choice2", the
      third "choice3"); RandomChoice over geometries: the geometry (above); RandomApply over
      crops and resizes: the geometry, its steps or none ([RandomApply([RandomCrop(48)],
      p=0.4), Resize((64, 64))]: the steps after it end both); RandomOrder over flips alone:
      the flips, which commute; a flip among their items
      (RandomChoice([RandomHorizontalFlip(), RandomRotation(30), ColorJitter(...)])): drawn
      where the container runs it, the kernel's flip, the warps before the container
      mirrored (not before the geometry; in RandomOrder not with a warp)
    - then: Normalize, ToTensor, ConvertImageDtype, ToDtype (a float ToDtype without scale:
      floats of 0 to 255, a Normalize after it in levels; after Normalize, flips and nearest
      warps filling 0, as MNIST scripts write them, [ToTensor(), Normalize(...),
      RandomRotation(10)]: the image warped before it, filled with its mean); then
      RandomErasing, LinearTransformation (last, in this order; RandomErasing also just
      before the Normalize, as scripts write it: the values it writes normalized;
      LinearTransformation on a float output of one size); timm's ToTensor, MaybeToTensor,
      RandomErasing
    - channels (anywhere): RGB: an image of one channel (a grey set's, or after
      Grayscale(1)) made three equal ones, an RGB one as it is; so is a function or Lambda
      that returns img.convert("RGB") and nothing else (CLIP's preprocess)
    - several crops of each image (one such step): FiveCrop, TenCrop: each crop a view of
      its own (a Resize before it; Normalize, ToDtype, Grayscale after it): the Loader's
      `images` a list of the crops' batches, as DataLoader collates torchvision's tuple;
      gpudecode.transforms.Views calls them
    - detection boxes (anywhere; SanitizeBoundingBoxes after what moves them):
      SanitizeBoundingBoxes, ConvertBoundingBoxFormat, ClampBoundingBoxes: what a
      gpudecode.Boxes field hands out (the format; the boxes dropped after the last step,
      with their labels); the boxes are clamped at every step already
    - input conversion and no-ops (dropped): ToImage, PILToTensor, ToPureTensor,
      ToImageTensor, Identity, ToPILImage (first); timm's MaybePILToTensor
    - on the batch: MixUp, CutMix, RandomChoice over them, or any callable
      (Loader(batch_transform=))
(the end of the generated list)

Without Normalize or a float ToDtype the output is uint8, as torchvision's would be.
Without a geometry step the images keep their size (all of a batch must share it: tensor
shards stored at the training size, `gpudecode precache --size 224 --crop center`).
The semantics are torchvision's on float images (the uint8 input converted first). Values
given in pixel levels (a `fill`, a threshold) are in the input's uint8 levels, as
torchvision takes them for uint8 and PIL images; from_torchvision converts those given
after a float conversion. Equalize bins the image to uint8 levels and back, as
torchvision does for float images.

The package, one module per kind of step (each class declares the torchvision or timm
names it converts, its group and its kernel ops; lists and tables are derived):
    base        Transform, the program step, the registry of conversions
    canvas      RandomZoomOut, Pad (RandomRotation(expand=True) is in warps): each image on a canvas
                of its own, before the geometry
    geometry    the geometry steps and the flips
    colour      ColorJitter and the other per-pixel ops
    warps       rotations, affine and perspective warps
    policies    TrivialAugmentWide, RandAugment, AutoAugment, AugMix (timm_augment: timm's)
    containers  RandomApply, RandomChoice, RandomOrder
    crops       FiveCrop, TenCrop: each crop a view (views: Views, which calls several Composes at once)
    output      Normalize, ToDtype, RandomErasing, LinearTransformation
    targets     SanitizeBoundingBoxes, ConvertBoundingBoxFormat, ClampBoundingBoxes: what a Boxes
                field hands out (no pixel changes); boxes, masks, stored, warped: targets moved
                with their images
    plan, draws, rng, compose    a Compose's plan, its draws, each sample's generator, the launch
    convert     torchvision's and timm's objects as ours
"""
from __future__ import annotations

from ..errors import TransformError  # (the error a refused step raises, beside the steps)
from ..mixing import CutMix, MixUp
from .base import CONVERTS, Transform
from .canvas import Pad, RandomZoomOut
from .geometry import (CenterCrop, FixedSizeCrop, RandomCrop, RandomHorizontalFlip, RandomResize, RandomResizedCrop,
                       RandomShortestSize, RandomVerticalFlip, Resize, ResizeKeepRatio, ScaleJitter)
from .iou_crop import RandomIoUCrop
from .colour import (ColorJitter, GaussianBlur, GaussianNoise, Grayscale, RandomAdjustSharpness, RandomAutocontrast,
                     RandomChannelPermutation, RandomEqualize, RandomGrayscale, RandomInvert, RandomPhotometricDistort,
                     RandomPosterize, RandomSolarize, RGB)
from .warps import ElasticTransform, RandomAffine, RandomPerspective, RandomRotation
from .policies import AugMix, AutoAugment, RandAugment, TrivialAugmentWide
from .containers import RandomApply, RandomChoice, RandomOrder, SampleRandomChoice
from .output import LinearTransformation, Normalize, RandomErasing, ToDtype
from .targets import ClampBoundingBoxes, ConvertBoundingBoxFormat, SanitizeBoundingBoxes
from . import timm_augment  # (its classes declare the timm transforms they convert)
from .rng import sample_rng
from .compose import Compose
from .crops import FiveCrop, TenCrop
from .views import Views
from .ragged import RaggedBatch


# the ops under torchvision's names: each class that converts torchvision's namesake (its
# `converts=`), as they are defined; then what is not one op of a Compose
__all__ = [*(cls.__name__ for name, cls in CONVERTS.items() if name == f"torchvision.{cls.__name__}"),
           "Compose", "Transform", "RandomChoice", "FixedSizeCrop", "MixUp", "CutMix", "sample_rng", "RaggedBatch", "Views"]
