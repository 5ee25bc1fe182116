#pragma once
// What the network segments and what it reads: the classes by name (0 is the background), the
// input channels with how each is prepared, and the loss's weight of each class. A checkpoint
// keeps the task, so that predict prepares scans and names labels as training did.
//
// A channel is prepared by its modality, as nnU-Net does: CT in Hounsfield units is clipped to a
// window and scaled to [-1, 1]; any other modality (the MRI sequences of BraTS: FLAIR, T1w, ...)
// is z-scored over the body, the voxels that are not 0, and the background stays 0.

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meshtensor/meshtensor.hpp>

namespace unet3d {

namespace mt = meshtensor;

/// The soft-tissue window in HU, CT's default.
inline constexpr std::array<float, 2> soft_tissue_window{-160.0f, 240.0f};

/// One input channel: its modality, and for CT the window in HU.
struct Channel {
  std::string modality = "CT";
  std::array<float, 2> window = soft_tissue_window;

  /// CT is windowed; every other modality is z-scored over the body.
  bool windowed() const {
    std::string upper = modality;
    for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
    return upper == "CT";
  }
};

/// `hu` clipped to `window` and scaled to [-1, 1].
inline float windowed(float hu, const std::array<float, 2>& window) {
  const float middle = 0.5f * (window[0] + window[1]), half = 0.5f * (window[1] - window[0]);
  return (std::clamp(hu, window[0], window[1]) - middle) / half;
}

/// A network input of a windowed channel back in HU (clipped to the window).
inline float unwindowed(float v, const std::array<float, 2>& window) {
  return v * 0.5f * (window[1] - window[0]) + 0.5f * (window[0] + window[1]);
}

struct Task {
  std::vector<std::string> classes{"background", "organ", "tumour"};
  std::vector<Channel> channels{Channel{}};
  std::vector<double> class_weights{1.0, 3.0, 3.0};

  std::int64_t num_classes() const { return std::int64_t(classes.size()); }
  std::int64_t num_channels() const { return std::int64_t(channels.size()); }

  /// "0 background, 1 organ, 2 tumour": what a label file's values mean.
  std::string label_meanings() const {
    std::string text;
    for (std::size_t c = 0; c < classes.size(); ++c)
      text += (c ? ", " : "") + std::to_string(c) + " " + classes[c];
    return text;
  }

  std::string modalities() const {
    std::string text;
    for (std::size_t c = 0; c < channels.size(); ++c)
      text += (c ? ", " : "") + channels[c].modality;
    return text;
  }

  nlohmann::json to_json() const {
    nlohmann::json channel_list = nlohmann::json::array();
    for (const auto& c : channels) {
      nlohmann::json entry{{"modality", c.modality}};
      if (c.windowed()) entry["window"] = c.window;
      channel_list.push_back(entry);
    }
    // "inputs": a checkpoint's "channels" is the network's width.
    return {{"classes", classes}, {"inputs", channel_list}, {"class_weights", class_weights}};
  }

  /// The task a checkpoint's flags name; a checkpoint from before tasks had the phantoms' three
  /// classes (a count) and one CT channel.
  static Task from_json(const nlohmann::json& flags) {
    Task t;
    const auto classes = flags.value("classes", nlohmann::json());
    if (classes.is_array()) t.classes = classes.get<std::vector<std::string>>();
    if (flags.contains("inputs") && flags["inputs"].is_array()) {
      t.channels.clear();
      for (const auto& entry : flags["inputs"]) {
        Channel c;
        c.modality = entry.value("modality", std::string("CT"));
        if (entry.contains("window")) c.window = entry["window"].get<std::array<float, 2>>();
        t.channels.push_back(c);
      }
    }
    if (flags.contains("class_weights"))
      t.class_weights = flags["class_weights"].get<std::vector<double>>();
    return t;
  }
};

/// The loss's default weights: 1 for the background, 3 for each other class (the foreground
/// classes are small beside it).
inline std::vector<double> default_class_weights(std::size_t classes) {
  std::vector<double> weights(classes, 3.0);
  if (!weights.empty()) weights[0] = 1.0;
  return weights;
}

}  // namespace unet3d
