#pragma once
// One training step, as `unet3d train` runs it and `unet3d plan` plans it: the same code, which
// reads no value, so that a plan runs it on blocks without data.

#include <utility>

#include <meshtensor/meshtensor.hpp>

#include "metrics.hpp"
#include "model.hpp"
#include "options.hpp"
#include "phantom.hpp"

namespace unet3d {

/// The loss's weight of each class, on every processor.
inline mt::Tensor<float> class_weights(mt::Mesh& mesh, const TrainOptions& o) {
  return mt::generate<float>(mesh, "classes:3", "", [&](const mt::Index& i) {
    return float(o.class_weights[i["classes"]]);
  });
}

/// The model of the flags.
inline ModelConfig model_config(const TrainOptions& o) {
  ModelConfig config;
  config.depth = o.depth;
  config.channels = o.channels;
  config.norm = o.norm;
  config.seed = o.seed;
  config.recompute = o.recompute;
  return config;
}

/// One training step on `batch`: the logits and the loss, whose gradients Adam has applied. Nothing
/// here reads a value, so a plan (`unet3d plan`) runs the same step without data.
inline std::pair<mt::Tensor<float>, mt::Tensor<float>> train_step(
    UNet& net, nn::Adam<float>& adam, const Batch& batch, const mt::Tensor<float>& weights) {
  auto logits = net(batch.input, /*training=*/true);
  auto loss = segmentation_loss(logits, batch.labels, weights);
  mt::backward(loss);
  adam.step();
  adam.zero_grad();
  return {std::move(logits), std::move(loss)};
}

}  // namespace unet3d
