// unet3d: train a 3D U-Net on synthetic CT volumes split over processors, and predict with it.
//
//   unet3d train [--size 64] [--steps 150] [--mesh "rows:2; cols:2" --layout "x:rows; y:cols"] ...
//   unet3d train --data DIR [--spacing 1.5,1.5,2] [--shape 128,128,64] ...
//   unet3d predict --checkpoint DIR --input scan.nii.gz --output seg.nii.gz [--probabilities P]
//   unet3d predict --checkpoint DIR --input VOL.npy --output SEG.npy [--probabilities P.npy]
//   unet3d generate --output VOL.npy [--labels LABELS.npy] [--size 64] [--seed 1] [--index 0]
//
// Started by hand it runs --threads processors (default: the cores) as threads; under mpirun or
// srun one processor per rank, over MPI, or over NCCL with one GPU each (--backend nccl, where
// --device is cuda). Without --mesh, all processors split x.

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <meshtensor/meshtensor.hpp>

#include "auto_layout.hpp"
#include "options.hpp"
#include "plan.hpp"
#include "predict.hpp"
#include "train.hpp"

namespace mt = meshtensor;

namespace {

// A real number above zero, and finite: CLI11's PositiveNumber lets NaN through (no comparison
// with it is true) and infinity too.
const CLI::Validator FinitePositive(
    [](std::string& text) {
      std::size_t used = 0;
      double value = 0;
      try {
        value = std::stod(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == text.size() && std::isfinite(value) && value > 0) return std::string();
      return "must be a finite number above 0, not \"" + text + "\"";
    },
    "POSITIVE");

// The threads backend starts one thread per processor: far more than any machine's cores is a
// mistyped number, not a run.
constexpr int most_threads = 1024;

struct Distribution {
  std::string mesh, layout, layouts, backend, device;
  int threads = 0;
  // --layout auto and the plan's prediction
  std::string memory_per_processor, network, kernels;
  bool calibrate = false, predict = false;
};

// Where a run's processors are and where its tensors live: one layout per level of the U-Net
// (--layouts), or --layout's at every level; level 0's is the data's.
struct Placement {
  mt::MeshShape mesh;
  mt::LayoutSchedule layouts;                // empty until chosen where `choose`
  std::optional<unet3d::AutoLayout> choose;  // --layout auto
  unet3d::AutoLayout pricing;                // the network and kernels a prediction uses
  const mt::Layout& data_layout() const { return layouts.at(0); }
};

// `model`: the command runs the U-Net, whose levels may each have a layout (--layouts).
void add_distribution(CLI::App& app, Distribution& d, bool model = true) {
  app.add_option("--mesh", d.mesh,
                 "mesh axes, Mesh-TensorFlow syntax (default: all processors on one axis \"p\")");
  app.add_option(
      "--layout", d.layout,
      model ? "tensor dim to mesh axis rules (default: x, y, z on the mesh axes in "
              "order), or auto: a layout per level chosen by plans to fit "
              "--memory-per-processor in the least predicted time"
            : "tensor dim to mesh axis rules (default: x, y, z on the mesh axes in order)");
  if (model) {
    app.add_option("--layouts", d.layouts,
                   "one layout per level of the U-Net instead of --layout, separated by '|', the "
                   "last one repeating for the levels below, e.g. \"x:p | x:p | channels:p\"");
    app.add_option("--memory-per-processor", d.memory_per_processor,
                   "with --layout auto (and needed there): the most one processor may hold, "
                   "e.g. 2GiB, 512MiB");
    app.add_option("--network", d.network,
                   "with --layout auto or plan --predict: the link between processors, a name in "
                   "the networks file (" +
                       mt::config_directory().string() +
                       "/networks.txt): shared-memory (default), ib-hdr, ib-ndr, nvlink");
    app.add_option("--kernels", d.kernels,
                   "with --layout auto or plan --predict: another machine's kernel throughput "
                   "file (e.g. bench/presets/a100-kernels.txt) instead of this one's calibration");
    app.add_flag("--calibrate", d.calibrate,
                 "with --layout auto or plan --predict: measure this machine's kernels again "
                 "(otherwise once, then cached)");
  }
  app.add_option("--threads", d.threads,
                 "processors when not started by an MPI launcher (default: the cores)")
      ->check(CLI::Range(1, most_threads));
  app.add_option("--backend", d.backend,
                 "transport: threads, mpi, or nccl (one GPU per MPI rank) (default: threads when "
                 "started by hand, mpi under mpirun or srun)")
      ->check(CLI::IsMember({"threads", "mpi", "nccl"}));
  app.add_option("--device", d.device,
                 "where each processor computes: cpu, or cuda (one GPU per rank, with --backend "
                 "nccl) (default: the backend's, cpu for threads and mpi, cuda for nccl)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

void add_size(CLI::App& app, std::array<std::int64_t, 3>& size, std::int64_t& cube,
              std::vector<std::int64_t>& shape) {
  app.add_option("--size", cube, "edge of a cubic volume in voxels")->check(CLI::PositiveNumber);
  app.add_option("--shape", shape, "volume shape x,y,z for non-cubes")->expected(3)->delimiter(',');
  (void)size;
}

std::array<std::int64_t, 3> resolve_size(std::array<std::int64_t, 3> size, std::int64_t cube,
                                         const std::vector<std::int64_t>& shape) {
  if (cube > 0 && !shape.empty()) throw mt::Error("give --size or --shape, not both");
  if (cube > 0) return {cube, cube, cube};
  if (!shape.empty()) return {shape[0], shape[1], shape[2]};
  return size;
}

// The network and kernels a prediction prices a plan with.
unet3d::AutoLayout pricing_of(const Distribution& d) {
  unet3d::AutoLayout pricing;
  if (!d.network.empty()) {
    mt::network_named(d.network);  // refuses an unknown name, listing the known
    pricing.network = d.network;
  }
  pricing.calibrate = d.calibrate;
  if (!d.kernels.empty()) {
    if (d.calibrate)
      throw mt::Error("--kernels " + d.kernels +
                      " gives the kernels' throughput; --calibrate "
                      "measures this machine's instead: give one of them");
    mt::Throughput::from_file(d.kernels, "--kernels");  // refuses a file that does not read
    pricing.kernels = d.kernels;
  }
  return pricing;
}

// --layout auto's budget and pricing.
unet3d::AutoLayout auto_layout_of(const Distribution& d) {
  if (!d.layouts.empty())
    throw mt::Error("--layout auto chooses the layouts per level; leave out --layouts");
  if (d.memory_per_processor.empty())
    throw mt::Error(
        "--layout auto needs --memory-per-processor, the most one processor may "
        "hold, e.g. 2GiB or 512MiB");
  unet3d::AutoLayout a = pricing_of(d);
  a.budget_bytes = mt::parse_bytes(d.memory_per_processor, "--memory-per-processor");
  return a;
}

// The mesh and layout of this run, from the flags and the way the program was started.
Placement resolve(const Distribution& d) {
  mt::chosen_device(mt::chosen_transport(d.backend), d.device, "--device");
  auto launched = mt::launcher_world_size();
  if (launched && d.backend == "threads")
    throw mt::Error(
        "--backend threads runs every processor in this one process; start it without "
        "mpirun or srun, or use --backend mpi or nccl");
  if (!launched && (d.backend == "mpi" || d.backend == "nccl")) {
    if (d.threads > 0)
      throw mt::Error("--threads sets the processors of the threads backend; with --backend " +
                      d.backend + " start one process per processor with mpirun or srun");
    launched = 1;  // started by hand: a job of one rank
  }
  if (launched && d.threads > 0)
    throw mt::Error(
        "--threads sets the processors of a run without an MPI launcher; under mpirun the ranks "
        "are the processors");
  const int processors =
      launched
          ? *launched
          : (d.threads > 0 ? d.threads : int(std::max(1u, std::thread::hardware_concurrency())));
  const mt::MeshShape mesh =
      d.mesh.empty() ? mt::MeshShape{{"p", processors}} : mt::MeshShape(d.mesh);
  if (!d.mesh.empty() && !launched && d.threads > 0 && mesh.num_processors() != d.threads)
    throw mt::Error("--mesh \"" + d.mesh + "\" has " + std::to_string(mesh.num_processors()) +
                    " processors but --threads is " + std::to_string(d.threads));
  if (launched && mesh.num_processors() != *launched)
    throw mt::Error("--mesh \"" + d.mesh + "\" has " + std::to_string(mesh.num_processors()) +
                    " processors but the launcher started " + std::to_string(*launched));
  if (!d.layout.empty() && !d.layouts.empty())
    throw mt::Error("--layout \"" + d.layout + "\" and --layouts \"" + d.layouts +
                    "\" both say where tensors live; give --layout for one layout at every level "
                    "or --layouts for one per level");
  Placement where{mesh, {}, std::nullopt, pricing_of(d)};
  if (d.layout == "auto") {
    where.choose = auto_layout_of(d);
    return where;
  }
  if (!d.memory_per_processor.empty())
    throw mt::Error(
        "--memory-per-processor is the budget --layout auto chooses within; give "
        "--layout auto, or leave it out");
  if (!d.layouts.empty()) {
    try {
      where.layouts = mt::LayoutSchedule(d.layouts);
    } catch (const mt::Error& e) {
      throw mt::Error(std::string("--layouts: ") + e.what());
    }
  } else if (!d.layout.empty()) {
    where.layouts = mt::LayoutSchedule({mt::Layout(d.layout)});
  } else {
    std::vector<mt::LayoutRule> rules;
    const char* dims[3] = {"x", "y", "z"};
    for (std::size_t a = 0; a < mesh.rank() && a < 3; ++a) rules.push_back({dims[a], mesh[a].name});
    where.layouts = mt::LayoutSchedule({mt::Layout(rules)});
  }
  return where;
}

// The flags of `train`, which `plan` takes too.
struct TrainFlags {
  unet3d::TrainOptions options;
  std::int64_t cube = 0;
  std::vector<std::int64_t> shape;
  std::vector<double> class_weights, spacing;
};

void add_train_flags(CLI::App& cmd, TrainFlags& f) {
  add_size(cmd, f.options.size, f.cube, f.shape);
  cmd.add_option("--batch", f.options.batch, "volumes per step")->check(CLI::PositiveNumber);
  cmd.add_option("--depth", f.options.depth, "2x2x2 poolings (levels below the top)")
      ->check(CLI::Range(1, 6));
  cmd.add_option("--channels", f.options.channels, "channels at the top level, doubling per level")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--norm", f.options.norm, "batch, instance, group or none")
      ->check(CLI::IsMember({"batch", "instance", "group", "none"}));
  cmd.add_flag("--recompute", f.options.recompute,
               "keep only each level's input and output for backward and compute the "
               "rest again (less memory, about a third more compute)");
  cmd.add_option("--steps", f.options.steps, "training steps")->check(CLI::PositiveNumber);
  cmd.add_option(
         "--stop-after", f.options.stop_after,
         "end this run after so many steps, checkpointed, to --resume later (job time limits)")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--lr", f.options.lr, "Adam learning rate (cosine-decayed to a tenth)")
      ->check(FinitePositive);
  cmd.add_option("--on-nonfinite", f.options.on_nonfinite,
                 "when the loss or a gradient is NaN or infinite: stop (the default: an error "
                 "naming the step and the tensor, no checkpoint of it) or skip-step (the "
                 "optimiser skips that step)")
      ->check(CLI::IsMember({"stop", "skip-step"}));
  cmd.add_option("--class-weights", f.class_weights,
                 "cross-entropy weights of background, organ, tumour (default 1,3,3)")
      ->expected(3)
      ->delimiter(',')
      ->check(FinitePositive);
  cmd.add_option("--seed", f.options.seed, "seed of the weights and of the data");
  cmd.add_option("--checkpoint", f.options.checkpoint, "directory for checkpoints");
  cmd.add_flag("--resume", f.options.resume, "continue from the newest checkpoint in --checkpoint");
  cmd.add_option("--log", f.options.log, "metrics JSONL file (default: <out>/metrics.jsonl)");
  cmd.add_option("--out", f.options.out, "directory for pictures, curves and metrics");
  cmd.add_option("--validate-every", f.options.validate_every, "steps between validations")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--validation-volumes", f.options.validation_volumes,
                 "held-out volumes (0: no validation)")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--checkpoint-every", f.options.checkpoint_every, "steps between checkpoints")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--data", f.options.data,
                 "a folder of CT scans (NIfTI) with label volumes: LiTS names "
                 "volume-N.nii[.gz] + segmentation-N.nii[.gz], or a pairs.csv of "
                 "image,label; instead of phantoms. --size/--shape then resize each scan");
  cmd.add_option("--spacing", f.spacing,
                 "with --data: resample scans to this voxel spacing in mm, x,y,z (default: "
                 "each scan's own)")
      ->expected(3)
      ->delimiter(',')
      ->check(FinitePositive);
}

// The options of a command that takes a volume size (--size or --shape) beside them.
template <typename Options>
struct SizedFlags {
  Options options;
  std::int64_t cube = 0;
  std::vector<std::int64_t> shape;
};
using PredictFlags = SizedFlags<unet3d::PredictOptions>;
using GenerateFlags = SizedFlags<unet3d::GenerateOptions>;

// A subcommand with the distribution and size flags; the caller adds its own.
template <typename Options>
CLI::App* add_sized_command(CLI::App& app, const std::string& name, const std::string& about,
                            Distribution& distribution, SizedFlags<Options>& f, bool model) {
  auto* cmd = app.add_subcommand(name, about);
  add_distribution(*cmd, distribution, model);
  add_size(*cmd, f.options.size, f.cube, f.shape);
  return cmd;
}

CLI::App* add_predict_command(CLI::App& app, Distribution& distribution, PredictFlags& f) {
  auto* cmd = add_sized_command(app, "predict", "label a CT volume with a trained checkpoint",
                                distribution, f, /*model=*/true);
  cmd->add_option("--checkpoint", f.options.checkpoint, "checkpoint directory")->required();
  cmd->add_option("--input", f.options.input,
                  "a CT scan (.nii, .nii.gz), or a volume [x, y, z] or [batch, x, y, z] in HU "
                  "(float32 .npy)")
      ->required();
  cmd->add_option("--output", f.options.output,
                  "labels (uint8: 0 background, 1 organ, 2 tumour): .nii/.nii.gz on the scan's "
                  "grid for a scan, .npy for an .npy volume")
      ->required();
  cmd->add_option("--probabilities", f.options.probabilities,
                  "class probabilities (float32), as --output");
  return cmd;
}

CLI::App* add_generate_command(CLI::App& app, Distribution& distribution, GenerateFlags& f) {
  auto* cmd = add_sized_command(app, "generate", "write a held-out phantom volume and its labels",
                                distribution, f, /*model=*/false);
  cmd->add_option("--seed", f.options.seed,
                  "the training seed whose held-out volumes to draw from");
  cmd->add_option("--index", f.options.index, "which held-out volume");
  cmd->add_option("--output", f.options.output, "volume .npy (float32 HU)")->required();
  cmd->add_option("--labels", f.options.labels, "labels .npy (uint8)");
  return cmd;
}

// The train (and plan) flags that depend on each other, checked and carried into the options.
void resolve_train_flags(TrainFlags& flags, const Placement& where) {
  unet3d::TrainOptions& train = flags.options;
  train.size = resolve_size(train.size, flags.cube, flags.shape);
  train.preprocessing.depth = train.depth;
  train.layouts = train.preprocessing.layouts = where.layouts;
  const auto& spacing = flags.spacing;
  if (!spacing.empty()) {
    if (train.data.empty())
      throw mt::Error("--spacing resamples the scans of --data; give --data DIR");
    train.preprocessing.spacing = {spacing[0], spacing[1], spacing[2]};
  }
  if (!train.data.empty()) {
    if (train.batch != 1)
      throw mt::Error(
          "--batch " + std::to_string(train.batch) +
          ": with --data each step is one whole scan (scans differ in shape); use --batch 1");
    if (flags.cube > 0 || !flags.shape.empty()) train.preprocessing.shape = train.size;
  }
  if (!flags.class_weights.empty())
    train.class_weights = {flags.class_weights[0], flags.class_weights[1], flags.class_weights[2]};
  if (where.choose && !train.data.empty())
    throw mt::Error(
        "--layout auto chooses for phantom volumes of --size or --shape, not for the "
        "scans of --data, which differ in shape; choose with `unet3d plan --layout "
        "auto --size ...` and give its schedule as --layouts");
  if (train.data.empty() && !where.choose)
    unet3d::check_geometry(train.size, train.depth, where.mesh, where.layouts, train.batch);
  if (train.norm == "group" && train.channels % 4 != 0)
    throw mt::Error("--norm group needs --channels divisible by 4 groups, got " +
                    std::to_string(train.channels));
}

// The schedule --layout auto chose, checked and carried into the options.
void use_layouts(TrainFlags& flags, Placement& where, const mt::LayoutSchedule& chosen) {
  where.layouts = chosen;
  flags.options.layouts = flags.options.preprocessing.layouts = chosen;
  unet3d::check_geometry(flags.options.size, flags.options.depth, where.mesh, chosen,
                         flags.options.batch);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"unet3d: a 3D U-Net on CT-like volumes split over processors (meshtensor)"};
  app.require_subcommand(1);
  Distribution distribution;

  TrainFlags flags;
  auto* train_cmd = app.add_subcommand(
      "train", "train on fresh synthetic volumes each step, or on the CT scans of --data");
  add_distribution(*train_cmd, distribution);
  add_train_flags(*train_cmd, flags);
  auto* plan_cmd = app.add_subcommand(
      "plan",
      "what a training step with these flags would cost on each processor of --mesh, from the "
      "shapes alone: FLOPs, peak memory, halo exchanges, all-reduces (any mesh size, in seconds)");
  add_distribution(*plan_cmd, distribution);
  add_train_flags(*plan_cmd, flags);
  plan_cmd->add_flag("--predict", distribution.predict,
                     "also predict the step's time from this machine's kernel throughput "
                     "(calibrated once, cached) and --network");
  PredictFlags predict;
  auto* predict_cmd = add_predict_command(app, distribution, predict);
  GenerateFlags generate;
  auto* generate_cmd = add_generate_command(app, distribution, generate);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return mt::end_before_run(argc, argv, app.exit(e));  // --help: 0
  }
  Placement where;
  try {
    where = resolve(distribution);
    if (train_cmd->parsed() || plan_cmd->parsed()) {
      resolve_train_flags(flags, where);
    } else if (predict_cmd->parsed()) {
      predict.options.size = resolve_size(predict.options.size, predict.cube, predict.shape);
      predict.options.layouts = where.layouts;
      // A prediction meets each convolution shape once: timing oneDNN's two memory formats per
      // shape (what training does, over hundreds of steps) would cost ten times the inference.
      // The fixed rule by channel count instead, unless the user chose.
      setenv("MESHTENSOR_ONEDNN_FORMATS", "by_channels", /*overwrite=*/0);
    } else {
      auto& size = generate.options.size;
      size = resolve_size(size, generate.cube, generate.shape);
      mt::TensorLayout(
          mt::Shape{mt::Dim("x", size[0]), mt::Dim("y", size[1]), mt::Dim("z", size[2])},
          where.mesh, where.data_layout());
    }
    if (where.choose && (plan_cmd->parsed() || !mt::launcher_world_size()))
      use_layouts(flags, where, unet3d::choose_schedule(flags.options, where.mesh, *where.choose));
    if (plan_cmd->parsed()) {
      const bool price = distribution.predict || where.choose || !distribution.network.empty() ||
                         distribution.calibrate || !distribution.kernels.empty();
      unet3d::plan_training(flags.options, where.mesh, where.data_layout(),
                            price ? &where.pricing : nullptr);
      return 0;
    }
    if ((!distribution.network.empty() || distribution.calibrate ||
         !distribution.kernels.empty()) &&
        !where.choose)
      throw mt::Error(
          "--network, --kernels and --calibrate price plans: give them to `unet3d "
          "plan --predict` or with --layout auto");
  } catch (const std::exception& e) {
    return mt::fail_before_run(argc, argv, e.what(), 2, "unet3d");
  }
  return mt::run(
      argc, argv, where.mesh,
      [&](mt::Mesh& mesh) {
        if (train_cmd->parsed() && where.layouts.empty())  // auto, under a launcher
          use_layouts(flags, where, unet3d::choose_on_first(mesh, flags.options, *where.choose));
        if (train_cmd->parsed())
          unet3d::train(mesh, flags.options, where.data_layout());
        else if (predict_cmd->parsed())
          unet3d::predict(mesh, predict.options, where.data_layout());
        else
          unet3d::generate_volume(mesh, generate.options, where.data_layout());
      },
      distribution.backend, distribution.device);
}
