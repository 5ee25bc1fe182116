#pragma once
// `unet3d evaluate`: predicted label volumes against the true ones, per case and class — Dice,
// the 95% Hausdorff distance and the normalised surface Dice at a tolerance in millimetres (voxel
// spacing from the files), as MONAI defines them — and their means over the cases, written as JSON
// and CSV. Each processor reads and measures its own block; surfaces and distances come from
// surface_distance.hpp, exact on any mesh.

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meshtensor/io/tensor_nifti.hpp>
#include <meshtensor/meshtensor.hpp>

#include "checkpoint.hpp"
#include "console.hpp"
#include "dataset.hpp"
#include "predict.hpp"
#include "scan.hpp"
#include "surface_distance.hpp"

namespace unet3d {

struct EvaluateOptions {
  std::string predictions, labels;    // folders of NIfTI label volumes, matched by name
  std::vector<std::string> classes;   // names, the background first; empty: numbers
  double tolerance_mm = 1.0;          // of the normalised surface Dice
  std::string output = "evaluation";  // writes OUTPUT.json and OUTPUT.csv
};

/// One class of one case. NaN where a metric is undefined: HD95 and surface Dice where a mask is
/// empty (infinite HD95 where only one is), Dice where both are.
struct ClassScores {
  double dice = 0, hd95_mm = 0, nsd = 0;
};

namespace evaluation {

inline constexpr double undefined = std::numeric_limits<double>::quiet_NaN();

/// A predicted volume and its true labels, matched by case name.
struct Case {
  std::string name, prediction, label;
};

/// The cases of two folders: each prediction with the label file of its case name. Throws naming
/// the prediction whose label is missing.
inline std::vector<Case> match_cases(const std::string& predictions, const std::string& labels) {
  namespace fs = std::filesystem;
  for (const auto& [flag, dir] :
       {std::pair{"--predictions", predictions}, std::pair{"--labels", labels}})
    if (!fs::is_directory(dir))
      throw mt::IoError(std::string(flag) + " " + dir + ": no such directory");
  auto by_case = [](const std::string& dir) {
    std::map<std::string, std::string> files;
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_regular_file() && mt::nifti::is_nifti_name(name) && name[0] != '.')
        files[predict_inputs::case_and_channel(name).first] = entry.path().string();
    }
    return files;
  };
  const auto predicted = by_case(predictions), truth = by_case(labels);
  std::vector<Case> cases;
  for (const auto& [name, file] : predicted) {
    const auto label = truth.find(name);
    if (label == truth.end())
      throw mt::IoError(file + ": no label volume of case " + name + " in --labels " + labels +
                        " (expected " + name + ".nii.gz or " + name + ".nii)");
    cases.push_back({name, file, label->second});
  }
  if (cases.empty())
    throw mt::IoError("--predictions " + predictions +
                      ": holds no label volume (.nii or .nii.gz) to evaluate");
  return cases;
}

// A voxel count over all processors (each block counted once).
inline double count(mt::Mesh& mesh, double mine) {
  return mt::all_reduce_value(mesh.world(), mine, mt::ReduceOp::sum);
}

/// The scores of class `c` between the label volumes `predicted` and `truth` (same grid).
inline ClassScores score_class(const mt::Tensor<double>& predicted, const mt::Tensor<double>& truth,
                               double c, const std::array<double, 3>& spacing,
                               double tolerance_mm) {
  mt::Mesh& mesh = predicted.mesh();
  const auto p = mt::map(predicted, [c](double v) { return v == c ? 1.0 : 0.0; });
  const auto t = mt::map(truth, [c](double v) { return v == c ? 1.0 : 0.0; });
  double both = 0, in_p = 0, in_t = 0;
  if (counts_here(p)) {
    const auto pb = p.local(), tb = t.local();
    for (std::size_t i = 0; i < pb.size(); ++i) {
      both += pb.data()[i] * tb.data()[i];
      in_p += pb.data()[i];
      in_t += tb.data()[i];
    }
  }
  both = count(mesh, both), in_p = count(mesh, in_p), in_t = count(mesh, in_t);
  ClassScores s;
  s.dice = in_p + in_t > 0 ? 2 * both / (in_p + in_t) : undefined;
  if (in_p == 0 || in_t == 0) {
    s.hd95_mm = in_p + in_t > 0 ? std::numeric_limits<double>::infinity() : undefined;
    s.nsd = in_p + in_t > 0 ? 0.0 : undefined;
    return s;
  }
  const auto p_edges = mask_edges(p), t_edges = mask_edges(t);
  const auto p_to_t = edge_distances(p_edges, squared_distance_to(t_edges, spacing));
  const auto t_to_p = edge_distances(t_edges, squared_distance_to(p_edges, spacing));
  const double n_p = count(mesh, double(p_to_t.size())), n_t = count(mesh, double(t_to_p.size()));
  // MONAI's HausdorffDistanceMetric(percentile=95): the larger of the two directed percentiles.
  s.hd95_mm = std::max(percentile(mesh, p_to_t, n_p, 95), percentile(mesh, t_to_p, n_t, 95));
  double close = 0;
  for (const auto* distances : {&p_to_t, &t_to_p})
    for (double d : *distances) close += d <= tolerance_mm ? 1 : 0;
  s.nsd = count(mesh, close) / (n_p + n_t);
  return s;
}

/// The label volumes of a case, on `layout`: the prediction must lie on the label's grid and
/// both must hold classes of `names` only (where given).
struct CaseVolumes {
  mt::NiftiVolume label_volume;
  mt::Tensor<double> predicted, truth;
};

inline CaseVolumes read_case(mt::Mesh& mesh, const Case& c, const mt::Layout& layout) {
  const auto predicted_volume = mt::open_nifti(mesh, c.prediction);
  const auto label_volume = mt::open_nifti(mesh, c.label);
  check_same_grid(predicted_volume, label_volume, "prediction", "label volume");
  return {label_volume, mt::load_nifti<double>(mesh, predicted_volume, layout),
          mt::load_nifti<double>(mesh, label_volume, layout)};
}

/// The largest label value of a volume, checked to be a whole number of 0 or more.
inline double largest_label(const mt::Tensor<double>& labels, const std::string& path) {
  const double largest = mt::reduce_max(labels, "x, y, z").item();
  const double smallest = mt::reduce_min(labels, "x, y, z").item();
  if (smallest < 0 || largest != std::floor(largest))
    throw mt::IoError(path + ": holds label values from " + std::to_string(smallest) + " to " +
                      std::to_string(largest) + "; labels are class numbers 0, 1, 2, ...");
  return largest;
}

/// The label values above 0 that `labels` holds in any processor's block, in increasing order
/// (collective). The values must have passed largest_label.
inline std::vector<double> labels_present(const mt::Tensor<double>& labels) {
  std::set<double> mine;
  const auto block = labels.local();
  for (std::size_t i = 0; i < block.size(); ++i)
    if (block.data()[i] > 0) mine.insert(block.data()[i]);
  const auto all =
      mt::all_gather(labels.mesh().world(), std::vector<double>(mine.begin(), mine.end()));
  const std::set<double> present(all.begin(), all.end());
  return {present.begin(), present.end()};
}

/// A class scored: its label value and the name the report gives it.
struct ScoredClass {
  double value;
  std::string name;
};

/// The classes to score: those `given` names beyond the background (values 1, 2, ...), or
/// without names every label value above 0 that some volume holds, named by its number.
inline std::vector<ScoredClass> classes_to_score(const std::vector<std::string>& given,
                                                 const std::set<double>& present) {
  std::vector<ScoredClass> classes;
  for (std::size_t k = 1; k < given.size(); ++k) classes.push_back({double(k), given[k]});
  if (given.empty())
    for (const double v : present) classes.push_back({v, std::to_string(std::int64_t(v))});
  return classes;
}

// NaN and infinity as JSON has them: null, and the reason beside.
inline nlohmann::json number(double v) {
  if (std::isfinite(v)) return v;
  return nullptr;
}

inline std::string csv_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return "inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

}  // namespace evaluation

/// The scores of every case and class, and their means, written to OUTPUT.json and OUTPUT.csv.
inline void evaluate(mt::Mesh& mesh, const EvaluateOptions& o, const mt::Layout& layout) {
  using evaluation::number;
  const auto cases = evaluation::match_cases(o.predictions, o.labels);
  // The classes: --classes, or every label value some volume holds, by number.
  std::set<double> present;
  for (const auto& c : cases) {
    const auto volumes = evaluation::read_case(mesh, c, layout);
    for (const auto& [labels, path] :
         {std::pair{&volumes.predicted, c.prediction}, std::pair{&volumes.truth, c.label}}) {
      const double top = evaluation::largest_label(*labels, path);
      if (!o.classes.empty() && top >= double(o.classes.size()))
        throw mt::IoError(path + ": holds the label value " + std::to_string(int(top)) +
                          "; --classes names " + std::to_string(o.classes.size()) +
                          " classes (0 to " + std::to_string(o.classes.size() - 1) +
                          "): name them all");
      if (o.classes.empty())
        for (const double v : evaluation::labels_present(*labels)) present.insert(v);
    }
  }
  const auto classes = evaluation::classes_to_score(o.classes, present);
  std::vector<std::map<std::string, ClassScores>> scores;
  nlohmann::json case_list = nlohmann::json::array();
  std::string csv = "case,class,dice,hd95_mm,nsd\n";
  for (const auto& c : cases) {
    const auto [label_volume, predicted, truth] = evaluation::read_case(mesh, c, layout);
    const auto spacing = label_volume.spacing();
    nlohmann::json metrics = nlohmann::json::object();
    scores.emplace_back();
    for (const auto& [value, name] : classes) {
      const ClassScores s =
          evaluation::score_class(predicted, truth, value, spacing, o.tolerance_mm);
      scores.back()[name] = s;
      metrics[name] = {
          {"dice", number(s.dice)}, {"hd95_mm", number(s.hd95_mm)}, {"nsd", number(s.nsd)}};
      csv += c.name + "," + name + "," + evaluation::csv_number(s.dice) + "," +
             evaluation::csv_number(s.hd95_mm) + "," + evaluation::csv_number(s.nsd) + "\n";
    }
    case_list.push_back({{"case", c.name},
                         {"prediction", c.prediction},
                         {"label", c.label},
                         {"spacing_mm", spacing},
                         {"metrics", metrics}});
    if (mesh.processor() == 0) say("unet3d: evaluated %s\n", c.name.c_str());
  }
  // Means over the cases where a metric is defined (finite), with how many those are.
  nlohmann::json means = nlohmann::json::object();
  std::vector<std::string> names;
  for (const auto& scored : classes) {
    const std::string& name = scored.name;
    names.push_back(name);
    nlohmann::json mean = nlohmann::json::object();
    std::string row = "mean," + name;
    for (const auto& [metric, of] :
         {std::pair<std::string, double ClassScores::*>{"dice", &ClassScores::dice},
          {"hd95_mm", &ClassScores::hd95_mm},
          {"nsd", &ClassScores::nsd}}) {
      double sum = 0, n = 0;
      for (const auto& per_case : scores) {
        const double v = per_case.at(name).*of;
        if (std::isfinite(v)) sum += v, n += 1;
      }
      mean[metric] = n > 0 ? nlohmann::json(sum / n) : nlohmann::json(nullptr);
      mean[metric + "_cases"] = n;
      row += "," + evaluation::csv_number(n > 0 ? sum / n : evaluation::undefined);
    }
    means[name] = mean;
    csv += row + "\n";
  }
  const nlohmann::json report{
      {"tolerance_mm", o.tolerance_mm},
      {"classes", names},
      {"definitions",
       "Dice 2|P∩T|/(|P|+|T|), null where both are empty; hd95_mm the larger of the two "
       "directed 95th percentiles of surface distances (MONAI's HausdorffDistanceMetric), "
       "null where a mask is empty; nsd the share of surface voxels within tolerance_mm of "
       "the other surface (MONAI's SurfaceDiceMetric); means over the cases where defined"},
      {"cases", case_list},
      {"mean", means}};
  on_first(mesh, [&] {
    mt::io::write_durably(o.output + ".json", report.dump(2) + "\n");
    mt::io::write_durably(o.output + ".csv", csv);
  });
  if (mesh.processor() == 0)
    std::printf("%s\n", nlohmann::json{{"cases", cases.size()},
                                       {"mean", means},
                                       {"json", o.output + ".json"},
                                       {"csv", o.output + ".csv"}}
                            .dump()
                            .c_str());
}

}  // namespace unet3d
