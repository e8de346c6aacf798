// A warp's canvas on the CPU, sampled by nearest neighbour as torch's CPU grid_sample samples
// the grid torchvision's tensor warps make (F.rotate, F.affine; align_corners=False, zeros
// outside, then the fill): the same pixel picked for every output pixel, without the float
// image, the grid and the coverage channel torch's ops make on the way.
#pragma once

#include <cstdint>

namespace gpudecode {

// Whether warp_affine_nearest picks torch's pixels on this CPU: it needs FMA, as torch's
// AVX2 and AVX-512 grid_sample fuse the unnormalizing multiply-add (the caller also checks
// torch's own CPU capability).
bool warp_nearest_exact();

// out (uint8 [3, len(ys), len(xs)], planar, contiguous) = an image of h x w sampled at the grid
// of an affine warp, of which `src` holds the part of ph x pw pixels from (top, left) (uint8 at
// byte strides sy, sx, sc; the whole image where the part is): output pixel (i, j) reads the
// grid point g = (xs[j] * scale[0] + ys[i] * scale[2]) + scale[4] (x) and
// (xs[j] * scale[1] + ys[i] * scale[3]) + scale[5] (y), each product and sum rounded to
// float as torch's ops round them; unnormalized by the image's size as ((g + 1) * size / 2 -
// 0.5), fused; the nearest pixel (half to even) where it lies in the image, else `fill` (3
// levels). `xs` and `ys` are the output's pixel centres (torch.linspace's floats), `scale`
// the warp's inverse matrix divided by the image's half size, transposed ([3, 2] row by row).
// A perspective warp (`den` not null: 3 floats, [c6, c7, 1]): g is that numerator over the
// denominator (xs[j] * den[0] + ys[i] * den[1]) + den[2], less 1, as F.perspective's grid (its
// bmm's floats), `xs` and `ys` its pixel centres from 0.5, `scale` its numerator's matrix so.
// Returns the number of output pixels that picked a pixel of the image outside the part
// (written as the fill, nothing read outside `src`): 0 where the part holds every pick.
int64_t warp_affine_nearest(const uint8_t* src, int64_t h, int64_t w, int64_t top, int64_t left, int64_t ph,
                            int64_t pw, int64_t sy, int64_t sx, int64_t sc, const float* xs, int64_t ww,
                            const float* ys, int64_t wh, const float* scale, const float* den, const uint8_t* fill,
                            uint8_t* out);

// The same warp sampled bilinearly, as torch's CPU grid_sample interpolates (the weights
// (1 - dy)(1 - dx), (1 - dy) dx, dy (1 - dx), dy dx as its kernel forms them, the four taps
// summed in that order, each after the first fused, as torch's x86 wheels fuse them; a tap
// outside the image 0) a float image of the uint8 levels, then as torchvision's warps make
// a uint8 image of it: `fill` (3 levels) blended by the coverage (the same interpolation of
// ones: ((v - fill) * coverage) + fill, rounded apart), or none where `fill` is null; rounded
// half to even. Returns the number of output pixels with a tap in the image outside the part
// (their value not read: 0 where the part holds every tap).
int64_t warp_affine_bilinear(const uint8_t* src, int64_t h, int64_t w, int64_t top, int64_t left, int64_t ph,
                             int64_t pw, int64_t sy, int64_t sx, int64_t sc, const float* xs, int64_t ww,
                             const float* ys, int64_t wh, const float* scale, const float* den, const float* fill,
                             uint8_t* out);

}  // namespace gpudecode
