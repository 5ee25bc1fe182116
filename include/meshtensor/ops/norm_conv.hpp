#pragma once
// Batch norm (and its activation) followed by a convolution, the convolution's halo sent before
// the norm's statistics are agreed. The norm's all-gather makes every processor wait for the
// last; after it, a processor whose neighbour has not yet run its norm's output and sent its rows
// waits a second time, in the convolution (on a busy or oversubscribed machine, for as long as
// the neighbour is not scheduled). Here the rows leave first, raw, and each receiver applies the
// same per-channel scale, shift and floor to them as their owner applies to its block: the same
// values, so the results are those of the two ops one after the other.

#include <string>
#include <type_traits>
#include <vector>

#include "meshtensor/comm/halo_step.hpp"
#include "meshtensor/ops/conv.hpp"
#include "meshtensor/ops/norm.hpp"
#include "meshtensor/tensor/tensor.hpp"

namespace meshtensor {

/**
 * conv(batch_norm(x, gamma, beta, channels, epsilon, moments, activation), weight, window,
 * channels), in training mode, with the convolution's halo of the normalised x sent as raw x
 * before the statistics' all-gather (the receivers normalise it). Where no spatial dim is split,
 * where halo_overlap() is off, where x is not laid out as the convolution reads it and where the
 * window's padding holds other than zeros, the two ops run one after the other.
 */
template <class T, class W>
Tensor<T> batch_norm_conv(const Tensor<T>& x, const Tensor<W>& gamma, const Tensor<W>& beta,
                          const Tensor<W>& weight, const Window& window,
                          const std::string& channels = "channels", double epsilon = 1e-5,
                          std::common_type_t<Moments<W>>* moments = nullptr,
                          Activation activation = Activation::none) {
  const std::vector<std::string> reduced = detail::batch_norm_reduced(x.shape(), channels);
  if (window.padding_mode() != PadMode::zeros)  // the convolution pads its input first
    return conv(batch_norm(x, gamma, beta, channels, epsilon, moments, activation), weight, window,
                channels);
  auto setup = detail::conv_setup("conv", x, weight, window, channels, /*transposed=*/false);
  // Every processor must take the same road (each receiver normalises what it receives), so the
  // choice rests on what all share: the layouts and whether a spatial dim is split.
  const bool aligned = x.layout() == x.layout().with_layout(setup.layout);
  if (!detail::affine_per_key(x, reduced, gamma, beta))
    return detail::convolve(std::move(setup),
                            batch_norm(x, gamma, beta, channels, epsilon, moments, activation),
                            weight, channels);
  if (!halo_overlap() || !aligned || setup.call.plan.halo.exchanged().empty())
    // The two ops one after the other; the norm's output is written only if the convolution
    // cannot compute it as it reads its input (conv_forward_on_box).
    return detail::convolve(
        std::move(setup),
        detail::normalize_affine(x, reduced, gamma, beta, epsilon, moments, activation, nullptr,
                                 detail::OutputBlock::on_read),
        weight, channels);

  // The plan lives in `setup` until the convolution's backward is recorded, after its forward.
  const HaloExchange& halo = setup.call.plan.halo;
  auto pending = halo.begin(x.mesh(), HaloForm::pieces, x.array());
  detail::NormApplied<T> applied;
  const Tensor<T> normalised =
      detail::normalize_affine(x, reduced, gamma, beta, epsilon, moments, activation, &applied);
  detail::EarlyHalo<T> early{[&] { pending.progress(); },
                             [&] {
                               HaloPieces<T> pieces =
                                   halo.finish(x.mesh(), std::move(pending)).pieces;
                               for (auto& [box, values] : pieces) applied(box, values);
                               return pieces;
                             }};
  return detail::convolve(std::move(setup), normalised, weight, channels, &early);
}

}  // namespace meshtensor
