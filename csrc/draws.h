// A batch's random draws (gpudecode/_draws.py): the parameters Compose.make_params
// draws for the common plans, each sample from its own SplitMix64 stream, the same
// draws in the same order as the Python path (random.Random's uniform, randint and
// shuffle over that stream), so the two agree bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpudecode {

// One sample's stream: SplitMix64 keyed by (seed, epoch) and the sample's index.
struct SplitMix {
  uint64_t state;
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  static SplitMix keyed(uint64_t key, uint64_t index) { return SplitMix{mix(key ^ (index * 0xD1B54A32D192ED03ULL))}; }
  uint64_t next() {
    state += 0x9E3779B97F4A7C15ULL;
    return mix(state);
  }
  double random() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }
  // random.Random.uniform
  double uniform(double a, double b) { return a + (b - a) * random(); }
  // random.Random._randbelow_with_getrandbits: [0, n), n > 0
  int64_t below(int64_t n);
  // random.Random.randint: [a, b], a <= b
  int64_t randint(int64_t a, int64_t b) { return a + below(b - a + 1); }
};

// A geometry step (the plan's leading ones, in order).
enum GeomKind : int {
  kRandomResizedCrop = 1, kResize = 2, kCenterCrop = 3, kRandomCrop = 4, kCornerCrop = 5, kPadWindow = 6,
  kWindowCenter = 7, kWindowRandom = 8, kNestedCrop = 9
};
struct GeomStep {
  int kind = 0;
  // kRandomResizedCrop: scale lo, hi, log ratio lo, hi, ratio min, max
  // kResize: size h (or the shorter side's), w (-1: an int size), max_size (-1: none)
  // kCenterCrop: h, w
  // kRandomCrop: h, w, padding left, top, right, bottom, pad_if_needed
  // kCornerCrop: h, w, corner (top-left, top-right, bottom-left, bottom-right, center), mirror (0, 1 h, 2 v)
  // kPadWindow: padding left, top, right, bottom (the (resized) image's window larger by them: no draw)
  // kWindowCenter, kWindowRandom: a crop of a RandomResizedCrop's output (_Plan.rrc_window): that output's h, w,
  //   then kCenterCrop's or kRandomCrop's numbers; its top and left in the window columns
  // kNestedCrop: a crop of the crop the step before drew (nested_crops.CropOfCrop: unpadded, inside it): that
  //   crop's h, w, this one's kind (kCenterCrop or kRandomCrop), h, w; its offsets added to the crop columns
  double a[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
};

struct DrawPlan {
  std::vector<GeomStep> geometry;
  double flip = -1, vflip = -1;  // the flips' p; < 0: no such step
  bool jitter = false;           // a ColorJitter in the program (its only step)
  bool jitter_on[4] = {false, false, false, false};  // brightness, contrast, saturation, hue
  double jitter_lo[4] = {0, 0, 0, 0}, jitter_hi[4] = {0, 0, 0, 0};
};

// Columns of `ints` [N, kDrawCols]: the last crop (top, left, h, w), the last resize
// (h, w), flip, vflip (0/1), the jitter's order (4), a window's top and left (a crop of
// the RandomResizedCrop's output). `factors` [N, 4]: the jitter's factors (NaN where that
// range is off).
enum : int {
  kTop = 0, kLeft, kCropH, kCropW, kResizeH, kResizeW, kFlip, kVflip, kOrder, kWinTop = kOrder + 4, kWinLeft,
  kDrawCols
};

// Draws sample i (sizes [N, 2] as height, width) from SplitMix::keyed(key, indices[i]).
// "" on success, else why a sample cannot be drawn (its size; a crop larger than the
// padded image): the caller's Python path then raises its own error.
std::string draw_batch(const DrawPlan& plan, const int64_t* sizes, const int64_t* indices, size_t n, uint64_t key,
                       int64_t* ints, double* factors);

// RandomIoUCrop's draw (gpudecode/transforms/iou_crop.py, whose RandomIoUCrop.crop is the
// reference): rounds of an option and `trials` crops from the stream keyed by the image's
// key, in torchvision's float32 arithmetic, the first crop that holds a box's centre and
// overlaps one of those boxes by the option's IoU.
struct IouCropSpec {
  float min_scale = 0, scale_span = 0;    // the sides' factor: min_scale + span * U
  double min_aspect = 0, max_aspect = 0;  // the aspect ratios kept (w / h)
  std::vector<double> options;            // the minimum IoUs; one of 1 or more leaves the image as it is
  int64_t trials = 0;
  int64_t max_rounds = 0;  // options drawn before an image is its error
  int64_t work = 0;        // trial-box pairs tried, where no option leaves an image as it is
};
enum IouStatus : int8_t { kIouCrop = 0, kIouWhole = 1, kIouError = 2 };

// Image i: its stream's key keys[i], its size sizes[i] (h, w), its boxes (XYXY float32)
// boxes[offsets[i] .. offsets[i + 1]). Each image's status: kIouCrop (crops[i] its top,
// left, height, width; inside[offsets[i] ..] 1 for the boxes whose centres it holds),
// kIouWhole (crops[i] the whole image) or kIouError (no crop: the reference says why).
void iou_crops(const IouCropSpec& spec, const uint64_t* keys, const int64_t* sizes, const float* boxes,
               const int64_t* offsets, size_t n, int64_t* crops, int8_t* status, uint8_t* inside);

}  // namespace gpudecode
