#pragma once
// The 3D U-Net (Çiçek et al. 2016, as in Mesh-TensorFlow's example), written against global shapes
// [batch, x, y, z, channels]. Where the data lives is decided by the layout alone: the input's, or
// one per level (ModelConfig::layouts), the tensors moved into each level's layout as they enter
// it. Where no relayout stands between them, a level's last norm and the next level's first
// convolution run as one op (nn::norm_pool_conv down, nn::norm_up_conv up), the convolution's
// halo leaving before the norm's statistics are agreed.
//
//   level 0: conv-norm-relu x2 (C) ─────────────────────────── concat ─ conv-norm-relu x2 (C) ─
//   head
//      │ max-pool 2                                                 ↑ transposed conv 2, stride 2
//   level 1: conv-norm-relu x2 (2C) ──────────────── concat ─ conv-norm-relu x2 (2C)
//      │ max-pool 2                                       ↑
//      ...                                       (depth levels down, then the bottom at C·2^depth)

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <meshtensor/meshtensor.hpp>

namespace unet3d {

namespace mt = meshtensor;
namespace nn = meshtensor::nn;

struct ModelConfig {
  int depth = 3;     // number of 2x2x2 poolings
  int channels = 8;  // channels at level 0, doubling per level
  std::string norm = "batch";
  int classes = 3;
  int inputs = 1;  // input channels: CT alone, or several modalities (BraTS: 4 MRI sequences)
  std::uint64_t seed = 1;
  bool recompute = false;  // levels recomputed in backward instead of keeping their activations
  std::string precision = "fp32";  // or "bf16": activations in bfloat16, parameters in fp32
  mt::LayoutSchedule layouts;  // per level (encoder and decoder alike); empty: the input's layout
  // Biases in the convolutions a batch or instance norm follows. The norm subtracts each channel's
  // mean, bias included, so they change nothing but cost a pass over the activations each way;
  // checkpoints from before they were dropped have them (their flags lack "biases_before_norm").
  bool biases_before_norm = false;
  // Per level: whether its two convolutions share one exchange of a deep halo (the planner's
  // choice under --layout auto, or --deep-halos). Empty: none do.
  std::vector<bool> deep_halos;

  bool deep_halo(int level) const {
    return level < int(deep_halos.size()) && deep_halos[std::size_t(level)];
  }
};

/// Whether the convolutions that `config.norm` follows have biases: not where the norm cancels
/// them.
inline bool biased_before_norm(const ModelConfig& config) {
  return config.biases_before_norm || (config.norm != "batch" && config.norm != "instance");
}

inline const mt::DimNames spatial{"x", "y", "z"};

inline mt::Dim channels(std::int64_t n) { return mt::Dim("channels", n); }

/// Two 3x3x3 convolutions, each followed by normalisation and ReLU.
class DoubleConv {
 public:
  // The parameters are laid out as the level's activations (`layout`).
  DoubleConv(mt::Mesh& mesh, nn::Parameters<float>& params, const std::string& name,
             std::int64_t in, std::int64_t out, const ModelConfig& config, const mt::Layout& layout,
             bool deep_halo)
      : conv1_(mesh, params, name + "/conv1", channels(in), channels(out), three_cubed(),
               config.seed, /*transposed=*/false, biased_before_norm(config), layout),
        norm1_(mesh, params, name + "/norm1", nn::parse_norm(config.norm), channels(out), spatial,
               /*groups=*/4, /*momentum=*/0.1, /*epsilon=*/1e-5, layout),
        conv2_(mesh, params, name + "/conv2", channels(out), channels(out), three_cubed(),
               config.seed, /*transposed=*/false, biased_before_norm(config), layout),
        norm2_(mesh, params, name + "/norm2", nn::parse_norm(config.norm), channels(out), spatial,
               /*groups=*/4, /*momentum=*/0.1, /*epsilon=*/1e-5, layout),
        deep_halo_(deep_halo) {}

  // x is taken by value and replaced: the convolution keeps what backward needs of its input, so
  // a level's input (the decoder's concatenation) is freed as soon as its first convolution ran.
  template <class A>
  mt::Tensor<A> operator()(mt::Tensor<A> x, bool training) {
    return last_norm(up_to_last_norm(std::move(x), training), training);
  }

  // The level in parts, for ops that join its ends to its neighbours' (UNet::forward): its
  // convolutions up to the last norm, the same from the first convolution's output, the last norm.
  template <class A>
  mt::Tensor<A> up_to_last_norm(mt::Tensor<A> x, bool training) {
    return nn::conv_norm_conv(conv1_, norm1_, conv2_, std::move(x), training, mt::Activation::relu,
                              deep_halo_);
  }
  template <class A>
  mt::Tensor<A> after_first_conv(const mt::Tensor<A>& h, bool training) {
    return nn::norm_conv(norm1_, conv2_, h, training, mt::Activation::relu);
  }
  template <class A>
  mt::Tensor<A> last_norm(const mt::Tensor<A>& z, bool training) {
    return norm2_(z, training, mt::Activation::relu);
  }

  const nn::Conv<float>& conv1() const { return conv1_; }
  nn::Norm<float>& norm2() { return norm2_; }
  bool deep_halo() const { return deep_halo_; }

 private:
  static mt::Window three_cubed() { return mt::Window(spatial).kernel(3).padding("same"); }

  nn::Conv<float> conv1_;
  nn::Norm<float> norm1_;
  nn::Conv<float> conv2_;
  nn::Norm<float> norm2_;
  bool deep_halo_;  // the two convolutions share one exchange of a deep halo
};

class UNet {
 public:
  UNet(mt::Mesh& mesh, const ModelConfig& config) : config_(config) {
    const std::int64_t c = config.channels;
    std::int64_t in = config.inputs;
    for (int level = 0; level < config.depth; ++level) {
      down_.emplace_back(mesh, params_, "down" + std::to_string(level), in, c << level, config,
                         layout(level), config.deep_halo(level));
      in = c << level;
    }
    bottom_.emplace(mesh, params_, "bottom", in, c << config.depth, config, layout(config.depth),
                    config.deep_halo(config.depth));
    for (int level = config.depth - 1; level >= 0; --level) {
      const std::int64_t width = c << level;
      // Up-sampling reads the level below, so its weights are laid out as that level.
      up_.emplace_back(mesh, params_, "up" + std::to_string(level) + "/transposed",
                       channels(2 * width), channels(width),
                       mt::Window(spatial).kernel(2).stride(2), config.seed,
                       /*transposed=*/true, /*bias=*/true, layout(level + 1));
      merge_.emplace_back(mesh, params_, "up" + std::to_string(level), 2 * width, width, config,
                          layout(level), config.deep_halo(level));
    }
    head_.emplace(mesh, params_, "head", channels(c), channels(config.classes),
                  mt::Window(spatial).kernel(1), config.seed, /*transposed=*/false, /*bias=*/true,
                  layout(0));
  }

  /// Logits [batch, x, y, z, classes] for a batch [batch, x, y, z, channels] of prepared scans,
  /// computed in the config's precision (in bf16 the scans enter and the logits leave as fp32).
  mt::Tensor<float> operator()(mt::Tensor<float> x, bool training) {
    if (config_.precision == "bf16") return mt::cast<float>(bf16_logits(std::move(x), training));
    return forward(std::move(x), training);
  }

  /// A bf16 model's logits as it computes them, before operator() widens them: a loss that reads
  /// bf16 itself spares their fp32 copy through backward (12 MiB at 128^3).
  mt::Tensor<mt::bf16> bf16_logits(mt::Tensor<float> x, bool training) {
    if (config_.precision != "bf16")
      throw mt::Error("bf16_logits: the model computes in " + config_.precision + ", not bf16");
    return forward(mt::cast<mt::bf16>(x), training);
  }

  nn::Parameters<float>& parameters() { return params_; }
  const ModelConfig& config() const { return config_; }

 private:
  // A level's output on its way to the next level: before its last norm, which the next level's
  // entry applies (`awaiting` is the level), or normalised already (a recomputed level).
  template <class A>
  struct LevelOutput {
    mt::Tensor<A> tensor;
    DoubleConv* awaiting = nullptr;
  };

  template <class A>
  mt::Tensor<A> forward(mt::Tensor<A> x, bool training) {
    std::vector<mt::Tensor<A>> skips;
    LevelOutput<A> out = start(down_[0], enter(0, std::move(x)), training);
    for (std::size_t level = 0; level < down_.size(); ++level) {
      DoubleConv& next = level + 1 < down_.size() ? down_[level + 1] : *bottom_;
      auto [skip, below] = descend(std::move(out), level, next, training);
      skips.push_back(std::move(skip));
      out = std::move(below);
    }
    for (std::size_t i = 0; i < up_.size(); ++i) {
      const std::size_t level = up_.size() - 1 - i;
      out = ascend(std::move(out), level, skips.back(), up_[i], merge_[i], training);
      skips.pop_back();  // what backward needs of the skip, the concatenation keeps
    }
    return mt::rename((*head_)(finished(std::move(out), training)), "channels", "classes");
  }

  // `level` run on x: up to its last norm, or whole where it is recomputed.
  template <class A>
  LevelOutput<A> start(DoubleConv& level, mt::Tensor<A> x, bool training) {
    if (config_.recompute && training) return {run(level, std::move(x), training), nullptr};
    return {level.up_to_last_norm(std::move(x), training), &level};
  }

  template <class A>
  mt::Tensor<A> finished(LevelOutput<A> out, bool training) {
    return out.awaiting ? out.awaiting->last_norm(out.tensor, training) : std::move(out.tensor);
  }

  // Whether the ops between a level's last convolution and `next`'s first (at `next_level`) run
  // as one, its halo leaving before the norm's statistics are agreed: where no relayout and no
  // deep halo stand between them.
  template <class A>
  bool joins(const LevelOutput<A>& out, std::size_t level, std::size_t next_level,
             const DoubleConv& next) const {
    return out.awaiting && !next.deep_halo() && layout(level) == layout(next_level);
  }

  // Down from `level` to `next`: {the level's skip, next's output}.
  template <class A>
  std::pair<mt::Tensor<A>, LevelOutput<A>> descend(LevelOutput<A> out, std::size_t level,
                                                   DoubleConv& next, bool training) {
    const mt::Window pool = mt::Window(spatial).kernel(2);
    if (joins(out, level, level + 1, next)) {
      // The level's output is let go with the op: it holds what backward needs of it.
      auto [skip, h] =
          nn::norm_pool_conv(out.awaiting->norm2(), pool, next.conv1(),
                             std::exchange(out.tensor, {}), training, mt::Activation::relu);
      return {std::move(skip), {next.after_first_conv(h, training), &next}};
    }
    mt::Tensor<A> skip = finished(std::move(out), training);
    return {skip, start(next, enter(level + 1, mt::max_pool(skip, pool)), training)};
  }

  // Up from the level below to `level`: up-sampled, joined to the skip, `merge` run on them.
  template <class A>
  LevelOutput<A> ascend(LevelOutput<A> out, std::size_t level, const mt::Tensor<A>& skip,
                        const nn::Conv<float>& up, DoubleConv& merge, bool training) {
    if (joins(out, level + 1, level, merge)) {
      auto h = nn::norm_up_conv(out.awaiting->norm2(), up, skip, merge.conv1(),
                                std::exchange(out.tensor, {}), training, mt::Activation::relu);
      return {merge.after_first_conv(h, training), &merge};
    }
    auto joined =
        mt::concat({skip, enter(level, up(finished(std::move(out), training)))}, "channels");
    return start(merge, std::move(joined), training);
  }

  // The layout of a level's tensors and parameters: the schedule's, or none of its own (parameters
  // replicated, activations left where the input put them).
  mt::Layout layout(std::size_t level) const {
    return config_.layouts.empty() ? mt::Layout{} : config_.layouts.at(level);
  }

  // A tensor entering `level`, moved into the level's layout (gradients move back).
  template <class A>
  mt::Tensor<A> enter(std::size_t level, mt::Tensor<A> x) const {
    return config_.layouts.empty() ? x : mt::relayout(x, config_.layouts.at(level));
  }

  // A level's two convolutions, recomputed in backward when the config says so.
  template <class A>
  mt::Tensor<A> run(DoubleConv& level, mt::Tensor<A> x, bool training) {
    if (!config_.recompute || !training) return level(std::move(x), training);
    return mt::autodiff::recompute<A>(
        [&level](const std::vector<mt::Tensor<A>>& in) { return level(in[0], true); }, {x});
  }

  ModelConfig config_;
  nn::Parameters<float> params_;
  std::vector<DoubleConv> down_, merge_;
  std::optional<DoubleConv> bottom_;
  std::vector<nn::Conv<float>> up_;
  std::optional<nn::Conv<float>> head_;
};

}  // namespace unet3d
