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
#include <optional>
#include <string>
#include <thread>

#include <meshtensor/meshtensor.hpp>

#include "auto_layout.hpp"
#include "console.hpp"
#include "evaluate.hpp"
#include "options.hpp"
#include "plan.hpp"
#include "predict.hpp"
#include "task_flags.hpp"
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
  std::string mesh, layout, layouts, backend, device, math;
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
  mt::Settings settings;                     // the environment's, with --backend and --device
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
  app.add_option("--math", d.math,
                 "float convolutions on a GPU: fp32 (multiply-adds, results as the CPU's to float "
                 "rounding) or tf32 (also tensor cores; results differ beyond rounding) (default: "
                 "fp32, or MESHTENSOR_MATH)")
      ->check(CLI::IsMember({"fp32", "tf32"}));
}

// --size and --shape, whose default `size` the help shows (none where it is all 0: the input's).
void add_size(CLI::App& app, const std::array<std::int64_t, 3>& size, std::int64_t& cube,
              std::vector<std::int64_t>& shape) {
  const std::string shown = size[0]
                                ? " (default " + std::to_string(size[0]) + "x" +
                                      std::to_string(size[1]) + "x" + std::to_string(size[2]) + ")"
                                : " (default: the input's; where given, the input must have it)";
  app.add_option("--size", cube, "edge of a cubic volume in voxels" + shown)
      ->check(CLI::PositiveNumber);
  app.add_option("--shape", shape, "volume shape x,y,z for non-cubes" + shown)
      ->expected(3)
      ->delimiter(',');
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

// The mesh and layout of this run, from the flags and the way the program was started; for a plan
// (`planning`), of the run the flags describe, on a mesh of any size.
Placement resolve(const Distribution& d, bool planning) {
  mt::Settings settings = mt::environment_settings();
  if (!d.backend.empty()) settings.transport = d.backend;
  if (!d.device.empty()) settings.device = d.device;
  if (!d.math.empty())
    settings.kernels.math =
        d.math == "tf32" ? mt::KernelPolicy::Math::tf32 : mt::KernelPolicy::Math::fp32;
  mt::chosen_device(mt::chosen_transport(settings), settings,
                    d.device.empty() ? "MESHTENSOR_DEVICE" : "--device");
  auto launched = planning ? std::nullopt : mt::launcher_world_size();
  if (launched && d.backend == "threads")
    throw mt::Error(
        "--backend threads runs every processor in this one process; start it without "
        "mpirun or srun, or use --backend mpi or nccl");
  if (!planning && !launched && (d.backend == "mpi" || d.backend == "nccl")) {
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
  Placement where{mesh, {}, std::nullopt, pricing_of(d), settings};
  if (d.layout == "auto") {
    where.choose = auto_layout_of(d);
    // The budget holds for the peaks planned: oneDNN's formats by the channel rule, which plans
    // assume, rather than timed at a shape's first call with copies the plans do not hold.
    auto& formats = where.settings.kernels.onednn_formats;
    if (formats == mt::KernelPolicy::Formats::chosen)
      formats = mt::KernelPolicy::Formats::by_channels;
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

// Flags of every command, given before or after it: --config, --print-config, --quiet,
// --version.
struct GlobalFlags {
  bool print_config = false, quiet = false;
};

// The version, and what this build can run on.
std::string version_text() {
  std::string transports = "threads", devices = "cpu";
#ifdef MESHTENSOR_WITH_MPI
  transports += ", mpi";
#endif
#ifdef MESHTENSOR_WITH_CUDA
  transports += ", nccl";
  devices += ", cuda";
#endif
#ifdef MESHTENSOR_WITH_ONEDNN
  devices += " (oneDNN kernels)";
#endif
  return std::string("unet3d ") + mt::version + " (meshtensor " + mt::version +
         ")\ntransports: " + transports + "\ndevices: " + devices +
         "\nlicense: Apache-2.0; cite with CITATION.cff";
}

void add_global_flags(CLI::App& app, GlobalFlags& global) {
  app.set_version_flag("--version", version_text());
  app.set_config(
      "--config", "",
      "read flags from FILE: a section [train] (or [predict], [plan], [generate], [evaluate]) "
      "then `flag = value` lines, as --print-config writes them; flags given on the "
      "command line win");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.fallthrough();  // these flags may also follow the command's name
  app.add_flag("--print-config", global.print_config,
               "print the command's flags with their values (defaults included) as a --config "
               "file, and exit without running")
      ->configurable(false);
  app.add_flag("--quiet", global.quiet,
               "print only errors, warnings and the command's closing JSON summary")
      ->configurable(false);
  app.footer(
      "Examples:\n"
      "  unet3d train                                      # phantoms, all cores, x split\n"
      "  unet3d train --data Task03_Liver --shape 128,128,64 --checkpoint ckpt\n"
      "  unet3d train --print-config --steps 300 > run.toml; unet3d train --config run.toml\n"
      "  mpirun -np 4 unet3d train --mesh \"rows:2; cols:2\" --layout \"x:rows; y:cols\"\n"
      "  unet3d predict --checkpoint ckpt --input scan.nii.gz --output labels.nii.gz\n"
      "Run `unet3d COMMAND --help` for a command's flags; --config FILE, --print-config, "
      "--quiet and --version go with any command.");
}

// Defaults that say nothing are left out of --help: an empty list, and a flag whose text
// already says what its default is.
void tidy_defaults(CLI::App& app) {
  for (CLI::App* command : app.get_subcommands([](const CLI::App*) { return true; }))
    tidy_defaults(*command);
  for (CLI::Option* option : app.get_options()) {
    const std::string& shown = option->get_default_str();
    if (shown == "[]" || shown == "\"\"" ||
        option->get_description().find("default") != std::string::npos)
      option->default_str("");
  }
}

// CLI11's own report of a parse failure, with the file named where a --config file is at fault.
int exit_with(CLI::App& app, const CLI::ParseError& e) {
  if (dynamic_cast<const CLI::FileError*>(&e) != nullptr) {
    std::fprintf(stderr, "unet3d: error: --config: %s\n", e.what());
    return e.get_exit_code();
  }
  if (dynamic_cast<const CLI::ConfigError*>(&e) != nullptr) {
    std::fprintf(stderr,
                 "unet3d: error: --config: %s (a flag's name without its dashes, in the "
                 "section of its command: [train], [predict], [plan], [generate] or [evaluate])\n",
                 e.what());
    return e.get_exit_code();
  }
  return app.exit(e);
}

// `text` as a TOML string: quoted, with its quotes and backslashes escaped.
std::string toml_string(const std::string& text) {
  std::string quoted = "\"";
  for (char c : text) quoted += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return quoted + "\"";
}

// One flag's line of a --config file: the values given, else its default; none where it has no
// default to show (it is left to mean what leaving it out means).
std::string config_line(const CLI::Option& option) {
  std::vector<std::string> values = option.results();
  if (option.count() == 0) {
    if (option.get_default_str().empty()) return "";
    values = {option.get_default_str()};
  }
  std::string text;
  const bool list = option.get_expected_max() > 1 || values.size() > 1;
  for (const auto& v : values) {
    const bool number = !v.empty() && v.find_first_not_of("0123456789.eE+-") == std::string::npos;
    const bool boolean = v == "true" || v == "false";
    text += (text.empty() ? "" : ", ") + (number || boolean ? v : toml_string(v));
  }
  if (option.get_type_size() == 0 && option.count() > 0) text = "true";  // a flag given
  return option.get_single_name() + " = " + (list ? "[" + text + "]" : text) + "\n";
}

// The effective flags of the command given, as a --config file.
void print_config(const CLI::App& app) {
  for (const CLI::App* command : app.get_subcommands()) {
    std::printf("# unet3d %s, meshtensor %s: read back with --config FILE\n[%s]\n",
                command->get_name().c_str(), mt::version, command->get_name().c_str());
    for (const CLI::Option* option : command->get_options())
      if (option->get_configurable() && !option->get_lnames().empty() &&
          option->get_single_name() != "help")
        std::printf("%s", config_line(*option).c_str());
  }
}

// The flags of `train`, which `plan` takes too.
struct TrainFlags {
  unet3d::TrainOptions options;
  std::int64_t cube = 0;
  std::vector<std::int64_t> shape;
  std::vector<double> spacing;
  unet3d::TaskFlags task;
  std::string augment = "none";
};

// The flags that say what is segmented from what: classes, channels and their preparation.
void add_task_flags(CLI::App& cmd, unet3d::TaskFlags& f) {
  cmd.add_option("--classes", f.classes,
                 "class names in label order, the background first (default: a dataset.json's "
                 "labels, else background,organ,tumour), e.g. background,liver,tumour")
      ->delimiter(',');
  cmd.add_option("--modalities", f.modalities,
                 "the input channels in order (default: a dataset.json's modality, else CT): "
                 "CT is windowed (--window), any other (FLAIR, T1w, ...) z-scored over the body; "
                 "a scan holds them in one 4-D file or one file each")
      ->delimiter(',');
  cmd.add_option("--window", f.window,
                 "the HU window of CT channels, LOW,HIGH, scaled to [-1, 1] (default -160,240: "
                 "soft tissue)")
      ->expected(2)
      ->delimiter(',')
      ->check(CLI::Number);
  cmd.add_option("--class-weights", f.class_weights,
                 "cross-entropy weight of each class (default: 1 for the background, 3 for "
                 "the others)")
      ->delimiter(',')
      ->check(FinitePositive);
}

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
  cmd.add_option("--deep-halos", f.options.deep_halos,
                 "levels whose two convolutions share one halo exchange as wide as both "
                 "(computing the rows the second needs twice): off, on, auto (chosen by plans "
                 "on --network and this machine's kernels) or levels such as 2,3; where unset, "
                 "auto with --layout auto, else off");
  cmd.add_option("--precision", f.options.precision,
                 "fp32, or bf16: activations, halos and the weights used in compute in "
                 "bfloat16 (half the memory); master weights, Adam, normalisation statistics, "
                 "the loss and weight-gradient sums in fp32")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd.add_flag("--graphs", f.options.graphs,
               "on GPUs (--backend nccl), run each training step from the second on as one "
               "CUDA graph: one launch instead of hundreds of kernels (mt::StepGraph)");
  cmd.add_option("--steps", f.options.steps, "training steps")->check(CLI::PositiveNumber);
  cmd.add_option("--stop-after", f.options.stop_after,
                 "end this run after so many steps, checkpointed, to --resume later (job time "
                 "limits) (default: never)")
      ->check(CLI::PositiveNumber);
  cmd.add_option("--lr", f.options.lr, "Adam learning rate (cosine-decayed to a tenth)")
      ->check(FinitePositive);
  cmd.add_option("--on-nonfinite", f.options.on_nonfinite,
                 "when the loss or a gradient is NaN or infinite: stop (the default: an error "
                 "naming the step and the tensor, no checkpoint of it) or skip-step (the "
                 "optimiser skips that step)")
      ->check(CLI::IsMember({"stop", "skip-step"}));
  add_task_flags(cmd, f.task);
  cmd.add_option("--augment", f.augment,
                 "training-time augmentation, the same on every mesh: none, all, or a list of "
                 "flip (along x, y, z), rotate (90° turns in a plane of equal sides), intensity "
                 "(scale and shift per channel)");
  cmd.add_option("--seed", f.options.seed, "seed of the weights and of the data");
  cmd.add_option("--checkpoint", f.options.checkpoint,
                 "directory for checkpoints: the latest, and the best by validation Dice");
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
                 "scans (NIfTI) with label volumes instead of phantoms: a Decathlon "
                 "dataset.json (or its folder), or a folder with LiTS names "
                 "volume-N.nii[.gz] + segmentation-N.nii[.gz] or a pairs.csv of image,label. "
                 "--size/--shape then resize each scan");
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
  auto* cmd = add_sized_command(app, "predict", "label scans with a trained checkpoint",
                                distribution, f, /*model=*/true);
  cmd->add_option("--checkpoint", f.options.checkpoint, "checkpoint directory")->required();
  cmd->add_option("--pick", f.options.which,
                  "which checkpoint of --checkpoint: best (by validation Dice; latest where "
                  "training kept no best) or latest")
      ->check(CLI::IsMember({"best", "latest"}));
  cmd->add_option("--input", f.options.inputs,
                  "a scan (.nii, .nii.gz; one 4-D file, or one file per channel), a folder of "
                  "scans (nnU-Net's CASE_0000.nii.gz names group channels), a dataset.json (its "
                  "test scans), or a volume [x, y, z] or [batch, x, y, z] (float32 .npy)")
      ->required();
  cmd->add_option("--output", f.options.output,
                  "labels (uint8, the class numbers): .nii/.nii.gz on the scan's grid for a "
                  "scan, a folder (one CASE.nii.gz per scan) for a folder or dataset.json, .npy "
                  "for an .npy volume")
      ->required();
  cmd->add_option("--probabilities", f.options.probabilities,
                  "class probabilities (float32), as --output");
  cmd->add_option("--precision", f.options.precision,
                  "fp32, or bf16 activations (default: the precision the checkpoint trained in)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->footer(
      "Examples:\n"
      "  unet3d predict --checkpoint ckpt --input scan.nii.gz --output labels.nii.gz\n"
      "  unet3d predict --checkpoint ckpt --input imagesTs --output predictions\n"
      "  unet3d predict --checkpoint ckpt --input BraTS_001_0000.nii.gz BraTS_001_0001.nii.gz "
      "BraTS_001_0002.nii.gz BraTS_001_0003.nii.gz --output BraTS_001.nii.gz");
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

CLI::App* add_evaluate_command(CLI::App& app, Distribution& distribution,
                               unet3d::EvaluateOptions& o) {
  auto* cmd = app.add_subcommand(
      "evaluate",
      "score predicted label volumes against the true ones: per case and class Dice, 95% "
      "Hausdorff distance and normalised surface Dice (MONAI's definitions), as JSON and CSV");
  add_distribution(*cmd, distribution, /*model=*/false);
  cmd->add_option("--predictions", o.predictions,
                  "folder of predicted label volumes (NIfTI), e.g. predict's --output")
      ->required();
  cmd->add_option("--labels", o.labels,
                  "folder of the true label volumes, matched to the predictions by case name "
                  "(CASE.nii.gz), on the same grids")
      ->required();
  cmd->add_option("--classes", o.classes,
                  "class names in label order, the background first (default: every label value "
                  "above 0 the volumes hold, named by its number)")
      ->delimiter(',');
  cmd->add_option("--tolerance", o.tolerance_mm,
                  "the normalised surface Dice's tolerance in mm (spacings from the files)")
      ->check(FinitePositive);
  cmd->add_option("--output", o.output, "writes OUTPUT.json and OUTPUT.csv");
  cmd->footer(
      "Example:\n"
      "  unet3d predict --checkpoint ckpt --input Task03_Liver/imagesVal --output predicted\n"
      "  unet3d evaluate --predictions predicted --labels Task03_Liver/labelsVal --classes "
      "background,liver,tumour --tolerance 2");
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
  train.task = unet3d::resolve_task(flags.task, train.data);
  train.augment = unet3d::Augmentation::parse(flags.augment);
  if (where.choose && !train.data.empty())
    throw mt::Error(
        "--layout auto chooses for phantom volumes of --size or --shape, not for the "
        "scans of --data, which differ in shape; choose with `unet3d plan --layout "
        "auto --size ...` and give its schedule as --layouts");
  if (train.data.empty() && !where.choose)
    unet3d::check_geometry(train.size, train.depth, where.mesh, where.layouts, train.batch);
  if (train.deep_halos.empty()) train.deep_halos = where.choose ? "auto" : "off";
  if (train.deep_halos != "auto")
    train.deep_halos =
        unet3d::deep_halos_text(unet3d::deep_halo_levels(train.deep_halos, train.depth));
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
  app.option_defaults()->always_capture_default();  // --help shows each flag's default
  GlobalFlags global;
  add_global_flags(app, global);
  Distribution distribution;

  TrainFlags flags;
  auto* train_cmd = app.add_subcommand(
      "train", "train on fresh synthetic volumes each step, or on the scans of --data");
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
  add_generate_command(app, distribution, generate);
  unet3d::EvaluateOptions evaluate;
  auto* evaluate_cmd = add_evaluate_command(app, distribution, evaluate);

  tidy_defaults(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return mt::end_before_run(argc, argv, exit_with(app, e));  // --help, --version: 0
  }
  unet3d::quiet() = global.quiet;
  if (global.print_config) {
    print_config(app);
    return 0;
  }
  Placement where;
  std::optional<mt::LocalProcessor> planner;
  try {
    where = resolve(distribution, plan_cmd->parsed());
    if (train_cmd->parsed() || plan_cmd->parsed()) {
      resolve_train_flags(flags, where);
    } else if (predict_cmd->parsed()) {
      predict.options.size = resolve_size(predict.options.size, predict.cube, predict.shape);
      predict.options.layouts = where.layouts;
      // A prediction meets each convolution shape once: timing oneDNN's two memory formats per
      // shape (what training does, over hundreds of steps) would cost ten times the inference.
      // The fixed rule by channel count instead, unless the user chose.
      auto& formats = where.settings.kernels.onednn_formats;
      if (formats == mt::KernelPolicy::Formats::chosen)
        formats = mt::KernelPolicy::Formats::by_channels;
    } else if (evaluate_cmd->parsed()) {
      if (mt::chosen_device(mt::chosen_transport(where.settings), where.settings) !=
          mt::DeviceKind::cpu)
        throw mt::Error(
            "evaluate measures surfaces on the CPU; leave out --device cuda and "
            "--backend nccl");
    } else {
      auto& size = generate.options.size;
      size = resolve_size(size, generate.cube, generate.shape);
      mt::TensorLayout(
          mt::Shape{mt::Dim("x", size[0]), mt::Dim("y", size[1]), mt::Dim("z", size[2])},
          where.mesh, where.data_layout());
    }
    // Plans made here (plan, --layout auto, --deep-halos auto) take the run's settings from this
    // thread's processor: they stand for the run on the device its transport carries.
    planner.emplace(mt::Device::cpu(), where.settings);
    if (where.choose && (plan_cmd->parsed() || !mt::launcher_world_size()))
      use_layouts(flags, where, unet3d::choose_schedule(flags.options, where.mesh, *where.choose));
    auto& deep_halos = flags.options.deep_halos;
    const bool deep_halos_chosen = deep_halos == "auto";
    if (deep_halos_chosen && !where.layouts.empty() &&
        (plan_cmd->parsed() || !mt::launcher_world_size()))
      deep_halos = unet3d::choose_deep_halos(flags.options, where.mesh, where.pricing);
    if (plan_cmd->parsed()) {
      const bool price = distribution.predict || where.choose || !distribution.network.empty() ||
                         distribution.calibrate || !distribution.kernels.empty();
      unet3d::plan_training(flags.options, where.mesh, where.data_layout(),
                            price ? &where.pricing : nullptr);
      return 0;
    }
    if ((!distribution.network.empty() || distribution.calibrate ||
         !distribution.kernels.empty()) &&
        !where.choose && !deep_halos_chosen)
      throw mt::Error(
          "--network, --kernels and --calibrate price plans: give them to `unet3d "
          "plan --predict` or with --layout auto or --deep-halos auto");
  } catch (const std::exception& e) {
    return mt::fail_before_run(argc, argv, e.what(), 2, "unet3d");
  }
  return mt::run(
      argc, argv, where.mesh,
      [&](mt::Mesh& mesh) {
        if (train_cmd->parsed() && where.layouts.empty())  // auto, under a launcher
          use_layouts(flags, where, unet3d::choose_on_first(mesh, flags.options, *where.choose));
        if (train_cmd->parsed() && flags.options.deep_halos == "auto")  // under a launcher
          flags.options.deep_halos =
              unet3d::choose_deep_halos_on_first(mesh, flags.options, where.pricing);
        if (train_cmd->parsed())
          unet3d::train(mesh, flags.options, where.data_layout());
        else if (predict_cmd->parsed())
          unet3d::predict(mesh, predict.options, where.data_layout());
        else if (evaluate_cmd->parsed())
          unet3d::evaluate(mesh, evaluate, where.data_layout());
        else
          unet3d::generate_volume(mesh, generate.options, where.data_layout());
      },
      where.settings);
}
