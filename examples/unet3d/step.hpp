#pragma once
// One training step, as `unet3d train` runs it and `unet3d plan` plans it: the same code, which
// reads no value, so that a plan runs it on blocks without data.

#include <array>
#include <cstdint>
#include <utility>

#include <meshtensor/meshtensor.hpp>

#include "metrics.hpp"
#include "model.hpp"
#include "options.hpp"
#include "phantom.hpp"

namespace unet3d {

/// The loss's weight of each class, on every processor.
inline mt::Tensor<float> class_weights(mt::Mesh& mesh, const TrainOptions& o) {
  const auto& weights = o.task.class_weights;
  return mt::generate<float>(mesh, mt::Shape{mt::Dim("classes", std::int64_t(weights.size()))},
                             mt::Layout{},
                             [&](const mt::Index& i) { return float(weights[i["classes"]]); });
}

/// The model of the flags.
inline ModelConfig model_config(const TrainOptions& o) {
  ModelConfig config;
  config.depth = o.depth;
  config.channels = o.channels;
  config.norm = o.norm;
  config.seed = o.seed;
  config.classes = int(o.task.num_classes());
  config.inputs = int(o.task.num_channels());
  config.recompute = o.recompute;
  config.precision = o.precision;
  config.layouts = o.layouts;
  if (o.deep_halos == "auto")
    throw mt::Error("internal: --deep-halos auto must be chosen before the model is built");
  config.deep_halos = deep_halo_levels(o.deep_halos, o.depth);
  return config;
}

/// Forward and backward on `batch`: the logits and the loss; the parameters hold their gradients.
inline std::pair<mt::Tensor<float>, mt::Tensor<float>> forward_backward(
    UNet& net, const Batch& batch, const mt::Tensor<float>& weights) {
  if (net.config().precision == "bf16") {  // the loss reads the bf16 logits: no fp32 copy kept
    auto logits = net.bf16_logits(batch.input, /*training=*/true);
    auto loss = segmentation_loss(logits, batch.labels, weights);
    mt::backward(loss);
    return {mt::cast<float>(logits.detach()), std::move(loss)};
  }
  auto logits = net(batch.input, /*training=*/true);
  auto loss = segmentation_loss(logits, batch.labels, weights);
  mt::backward(loss);
  return {std::move(logits), std::move(loss)};
}

/// One training step on `batch`: the logits and the loss, whose gradients Adam has applied. Nothing
/// here reads a value, so a plan (`unet3d plan`) runs the same step without data.
inline std::pair<mt::Tensor<float>, mt::Tensor<float>> train_step(
    UNet& net, nn::Adam<float>& adam, const Batch& batch, const mt::Tensor<float>& weights) {
  auto logits_and_loss = forward_backward(net, batch, weights);
  adam.step();
  adam.zero_grad();
  return logits_and_loss;
}

/// The FLOPs (two per multiply-add) of a convolution with `taps` taps per dim and zero padding
/// that keeps the size ("same") on volumes of `size`: the taps that read inside the volume.
inline double same_conv_flops(const std::array<std::int64_t, 3>& size, int taps, std::int64_t batch,
                              std::int64_t c_in, std::int64_t c_out) {
  double flops = 2.0 * double(batch * c_in * c_out);
  for (auto n : size) flops *= double(taps * n - (taps - 1));
  return flops;
}

/// The FLOPs of one training step's convolutions, from the model's definition (model.hpp):
/// forward, input gradient (but for the first convolution, whose input is data) and weight
/// gradient of each.
inline double conv_flops_per_step(const TrainOptions& o) {
  const std::int64_t c = o.channels, b = o.batch;
  auto size = [&](int level) {
    return std::array<std::int64_t, 3>{o.size[0] >> level, o.size[1] >> level, o.size[2] >> level};
  };
  double forward = 0, first = 0;
  std::int64_t in = o.task.num_channels();
  for (int level = 0; level <= o.depth; ++level) {  // the levels down, then the bottom
    const std::int64_t out = c << level;
    const double conv1 = same_conv_flops(size(level), 3, b, in, out);
    if (level == 0) first = conv1;
    forward += conv1 + same_conv_flops(size(level), 3, b, out, out);
    in = out;
  }
  for (int level = o.depth - 1; level >= 0; --level) {
    const std::int64_t width = c << level;
    // The 2x2x2 stride-2 transposed convolution: one tap per output voxel.
    forward += same_conv_flops(size(level), 1, b, 2 * width, width);
    forward += same_conv_flops(size(level), 3, b, 2 * width, width) +
               same_conv_flops(size(level), 3, b, width, width);
  }
  forward += same_conv_flops(size(0), 1, b, c, o.task.num_classes());  // the head
  return 3 * forward - first;
}

/// The model made and two training steps on phantom volumes: what `unet3d plan` plans (counting
/// from the second step on, the one every later step repeats, when `count_second_only`), and
/// what the tests and benchmarks hold a plan to.
inline void model_and_two_steps(mt::Mesh& mesh, const TrainOptions& o, const mt::Layout& layout,
                                bool count_second_only = false) {
  UNet net(mesh, model_config(o));
  nn::Adam<float> adam(net.parameters().trainable(), o.lr);
  const auto weights = class_weights(mesh, o);
  for (int step = 0; step < 2; ++step) {
    const Batch batch = make_batch(mesh, layout, o.seed, "train", step, o.batch, o.size);
    if (step == 1 && count_second_only) mt::count_from_here(mesh);  // the step, not its data
    train_step(net, adam, batch, weights);
  }
}

}  // namespace unet3d
