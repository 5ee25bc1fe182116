// The U-Net example's own input files as hostile input: pairs.csv as spreadsheets write it (a
// byte-order mark, quoted fields, CRLF), Decathlon dataset.json files and the task flags checked
// against them, and checkpoint manifests against their schema (every key, type and range; file
// names inside the checkpoint; `latest` beside it). And numbers that go
// bad in a step: the first non-finite one is named on every processor. And the phantom batches a
// data loader's worker draws: each processor's blocks are the volume's, on any mesh.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "dataset.hpp"
#include "finite.hpp"
#include "loader.hpp"
#include "manifest.hpp"
#include "predict.hpp"
#include "support/spmd.hpp"
#include "task_flags.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

fs::path write_csv(const std::string& text) {
  const fs::path dir = fs::temp_directory_path() / "meshtensor-test-pairs";
  fs::create_directories(dir);
  std::ofstream(dir / "pairs.csv", std::ios::binary) << text;
  return dir / "pairs.csv";
}

std::string csv_error(const std::string& text) {
  try {
    (void)unet3d::pairs::read_pairs_csv(write_csv(text));
  } catch (const meshtensor::IoError& e) {
    return e.what();
  }
  return "no error";
}

// A manifest as save_checkpoint writes it, for the tests to spoil.
json good_manifest() {
  return json::parse(R"({
    "format": "meshtensor-unet3d-checkpoint-1", "step": 12,
    "optimizer": {"type": "adam", "steps": 12},
    "flags": {"depth": 2, "channels": 4, "norm": "batch", "classes": 3, "seed": 1,
              "size": [16, 16, 16], "batch": 1, "lr": 0.003, "steps": 20,
              "class_weights": [1.0, 3.0, 3.0]},
    "tensors": [{"name": "down0.conv1.weight", "file": "down0.conv1.weight.npy",
                 "dims": ["kx", "ky", "kz", "channels", "channels_out"], "shape": [3, 3, 3, 1, 4],
                 "dtype": "float32", "kind": "parameter"}]})");
}

// A dataset.json (with its two cases' files, empty, unless `missing`) in a fresh folder; its path.
fs::path write_decathlon(const json& description, const std::string& missing = "") {
  const fs::path dir = fs::temp_directory_path() / "meshtensor-test-decathlon";
  fs::remove_all(dir);
  fs::create_directories(dir / "imagesTr");
  fs::create_directories(dir / "labelsTr");
  for (const char* file : {"imagesTr/a.nii.gz", "labelsTr/a.nii.gz", "imagesTr/b_0000.nii.gz",
                           "imagesTr/b_0001.nii.gz", "labelsTr/b.nii.gz"})
    if (file != missing) std::ofstream(dir / file) << "x";
  std::ofstream(dir / "dataset.json") << description.dump(2);
  return dir / "dataset.json";
}

json brats_like() {
  return json::parse(R"({
    "name": "BrainTumour", "modality": {"0": "FLAIR", "1": "T1w"},
    "labels": {"0": "background", "1": "edema", "2": "non-enhancing tumour",
               "3": "enhancing tumour"},
    "training": [{"image": "./imagesTr/a.nii.gz", "label": "./labelsTr/a.nii.gz"},
                 {"image": ["./imagesTr/b_0000.nii.gz", "imagesTr/b_0001.nii.gz"],
                  "label": "./labelsTr/b.nii.gz"}],
    "test": ["./imagesTs/c.nii.gz"]})");
}

std::string decathlon_error(const json& description) {
  try {
    (void)unet3d::decathlon::read(write_decathlon(description));
  } catch (const meshtensor::IoError& e) {
    return e.what();
  }
  return "no error";
}

std::string task_error(const unet3d::TaskFlags& flags, const std::string& data) {
  try {
    (void)unet3d::resolve_task(flags, data);
  } catch (const meshtensor::Error& e) {
    return e.what();
  }
  return "no error";
}

std::string manifest_error(const json& manifest) {
  try {
    unet3d::check_manifest(manifest, "ckpt/manifest.json");
  } catch (const meshtensor::IoError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("pairs.csv is read as spreadsheets write it") {
  const auto pairs =
      unet3d::pairs::read_pairs_csv(write_csv("\xEF\xBB\xBFimage,label\r\n"
                                              "\"scan 1.nii.gz\",\"labels, first.nii.gz\"\r\n"
                                              "  plain.nii , \"say \"\"hi\"\".nii\"  \r\n"));
  REQUIRE(pairs.size() == 2);  // the header, behind its byte-order mark, is not a pair
  CHECK(fs::path(pairs[0].images.front()).filename() == "scan 1.nii.gz");
  CHECK(fs::path(pairs[0].label).filename() == "labels, first.nii.gz");
  CHECK(fs::path(pairs[1].images.front()).filename() == "plain.nii");
  CHECK(fs::path(pairs[1].label).filename() == "say \"hi\".nii");
}

TEST_CASE("a pairs.csv row that is not two file names names its line") {
  CHECK_THAT(csv_error("a.nii,b.nii\nonly-one.nii\n"),
             Catch::Contains("pairs.csv:2: \"only-one.nii\" is not \"image,label\""));
  CHECK_THAT(csv_error("a.nii,b.nii,c.nii\n"), Catch::Contains("pairs.csv:1:"));
  CHECK_THAT(csv_error("\"a.nii,b.nii\n"), Catch::Contains("pairs.csv:1: a quote is not closed"));
  CHECK_THAT(csv_error("\"a.nii\"x,b.nii\n"),
             Catch::Contains("pairs.csv:1: text after a quoted field's closing quote"));
  CHECK_THAT(csv_error("a.nii,\n"), Catch::Contains("pairs.csv:1:"));
}

TEST_CASE("a Decathlon dataset.json gives the classes, modalities, training and test cases") {
  const fs::path path = write_decathlon(brats_like());
  const auto d = unet3d::decathlon::read(path);
  CHECK(d.classes == std::vector<std::string>{"background", "edema", "non-enhancing tumour",
                                              "enhancing tumour"});
  CHECK(d.modalities == std::vector<std::string>{"FLAIR", "T1w"});
  REQUIRE(d.training.size() == 2);
  CHECK(d.training[0].images ==
        std::vector<std::string>{(path.parent_path() / "imagesTr/a.nii.gz").string()});
  CHECK(d.training[1].images.size() == 2);  // MONAI's list of one file per channel
  CHECK(d.training[1].label == (path.parent_path() / "labelsTr/b.nii.gz").string());
  REQUIRE(d.test.size() == 1);
  CHECK(d.test[0].label.empty());
  // --data takes the file or its folder; a read dataset has its task.
  for (const auto& data : {path.string(), path.parent_path().string()}) {
    const auto dataset = unet3d::read_dataset(data, 1, 1);
    CHECK(dataset.train.size() + dataset.validation.size() == 2);
    CHECK(dataset.classes.size() == 4);
    const auto task = unet3d::resolve_task({}, data);
    CHECK(task.num_classes() == 4);
    CHECK(task.modalities() == "FLAIR, T1w");
    CHECK_FALSE(task.channels[0].windowed());  // MRI: z-scored over the body
    CHECK(task.class_weights == std::vector<double>{1, 3, 3, 3});
  }
}

TEST_CASE("a dataset.json off the Decathlon's form names the file and the key") {
  auto spoiled = [](const char* pointer, const json& value) {
    json d = brats_like();
    const json::json_pointer at(pointer);
    if (value.is_null())
      d[at.parent_pointer()].erase(at.back());
    else
      d[at] = value;
    return decathlon_error(d);
  };
  CHECK_THAT(spoiled("/labels", nullptr), Catch::Contains("dataset.json: has no \"labels\""));
  CHECK_THAT(spoiled("/labels/1", nullptr),
             Catch::Contains("\"labels\" has the key \"3\"; its keys must be the numbers 0 to 2"));
  CHECK_THAT(spoiled("/modality", json::array({"CT"})),
             Catch::Contains("\"modality\" must be an object"));
  CHECK_THAT(spoiled("/labels", json{{"0", "background"}}),
             Catch::Contains("\"labels\" names one class"));
  CHECK_THAT(spoiled("/training/1/label", nullptr),
             Catch::Contains("training[1] must be {\"image\": ..., \"label\": ...}"));
  CHECK_THAT(spoiled("/training/0/image", 7),
             Catch::Contains("training[0].image must be a file name"));
  CHECK_THAT(spoiled("/training/1/image", json::array()),
             Catch::Contains("training[1].image is an empty list"));
  // A listed file that is not there: the dataset.json and the file named.
  write_decathlon(brats_like(), "labelsTr/b.nii.gz");
  try {
    unet3d::read_dataset((fs::temp_directory_path() / "meshtensor-test-decathlon").string(), 0, 1);
    FAIL("a missing label file was not refused");
  } catch (const meshtensor::IoError& e) {
    CHECK_THAT(e.what(), Catch::Contains("dataset.json lists") &&
                             Catch::Contains("labelsTr/b.nii.gz: no such file"));
  }
}

TEST_CASE("the task flags are checked against the data, naming the flag") {
  const std::string data = write_decathlon(brats_like()).parent_path().string();
  unet3d::TaskFlags f;
  f.classes = {"background", "tumour"};
  CHECK_THAT(task_error(f, data), Catch::Contains("--classes background,tumour names 2 classes "
                                                  "but the dataset.json of --data"));
  CHECK_THAT(task_error(f, ""), Catch::Contains("the phantoms have 3 classes"));
  f.classes = {"background"};
  CHECK_THAT(task_error(f, ""), Catch::Contains("at least one more class"));
  f = {};
  f.modalities = {"FLAIR"};
  CHECK_THAT(task_error(f, data), Catch::Contains("--modalities FLAIR names 1 channels"));
  f = {};
  f.window = {-100, 200};
  CHECK_THAT(task_error(f, data), Catch::Contains("--window windows CT channels"));
  f.window = {200, -100};
  CHECK_THAT(task_error(f, ""), Catch::Contains("LOW below HIGH"));
  f = {};
  f.class_weights = {1, 2, 3};
  CHECK_THAT(task_error(f, data), Catch::Contains("--class-weights gives 3 weights for the 4"));
  // The phantoms' task, renamed and re-windowed; a CT study of one's own with its names.
  f = {};
  f.classes = {"bg", "liver", "lesion"};
  f.window = {-100, 200};
  const auto task = unet3d::resolve_task(f, "");
  CHECK(task.label_meanings() == "0 bg, 1 liver, 2 lesion");
  CHECK(task.channels[0].window == std::array<float, 2>{-100, 200});
  CHECK(unet3d::windowed(200, task.channels[0].window) == 1.0f);
  CHECK(unet3d::windowed(-100, task.channels[0].window) == -1.0f);
}

TEST_CASE("a manifest as the checkpoint writes it passes its schema") {
  CHECK(manifest_error(good_manifest()) == "no error");
  json older = good_manifest();
  older["optimizer"].erase("steps");  // written before Adam's step count was kept
  older["flags"].erase("class_weights");
  CHECK(manifest_error(older) == "no error");
  json unbiased = good_manifest();  // convolutions without the biases a norm cancels
  unbiased["flags"]["biases_before_norm"] = false;
  CHECK(manifest_error(unbiased) == "no error");
  // A task of its own: named classes, MRI inputs and a CT input with its window.
  json task = good_manifest();
  task["flags"]["classes"] = {"background", "edema", "tumour", "necrosis"};
  task["flags"]["class_weights"] = {1.0, 2.0, 3.0, 3.0};
  task["flags"]["inputs"] =
      json::parse(R"([{"modality": "FLAIR"}, {"modality": "CT", "window": [-100, 200]}])");
  task["validation_mean_dice"] = 0.75;
  CHECK(manifest_error(task) == "no error");
  const auto read = unet3d::Task::from_json(task["flags"]);
  CHECK(read.num_classes() == 4);
  CHECK(read.modalities() == "FLAIR, CT");
  CHECK(read.channels[1].window == std::array<float, 2>{-100, 200});
  // Before tasks: three classes by count, one CT channel.
  CHECK(unet3d::Task::from_json(good_manifest()["flags"]).label_meanings() ==
        "0 background, 1 organ, 2 tumour");
}

TEST_CASE("a manifest off its schema names the file, the key and what would be valid") {
  struct Spoiled {
    const char* pointer;  // a JSON pointer into the manifest
    json value;           // null: the key is removed
    const char* expected;
  };
  const Spoiled cases[] = {
      {"/format", "meshtensor-unet3d-checkpoint-9",
       "format is \"meshtensor-unet3d-checkpoint-9\"; it must be one of"},
      {"/step", -1, "step is -1; it must be an integer from 0"},
      {"/step", 1.5, "step is 1.5; it must be an integer"},
      {"/step", nullptr, "the manifest has no \"step\""},
      {"/optimizer/type", "sgd", "optimizer.type is \"sgd\"; it must be one of \"adam\""},
      {"/flags/depth", 0, "flags.depth is 0; it must be an integer from 1 to 6"},
      {"/flags/channels", "four", "flags.channels is \"four\"; it must be an integer"},
      {"/flags/norm", "layer", "flags.norm is \"layer\"; it must be one of \"batch\""},
      {"/flags/seed", -3, "flags.seed is -3; it must be an integer of 0 or more"},
      {"/flags/lr", "nan", "flags.lr is \"nan\"; it must be a finite number above 0"},
      {"/flags/size", json::array({16, 16}), "flags.size is [16,16]; it must be an array of 3"},
      {"/flags/class_weights/1", -3.0, "flags.class_weights[1] is -3.0; it must be a finite"},
      {"/flags/class_weights", json::array({1.0, 3.0}),
       "flags.class_weights is [1.0,3.0]; it must be an array of 3"},
      {"/flags/classes", 4, "flags.classes is 4; it must be an integer from 3 to 3"},
      {"/flags/biases_before_norm", "no",
       "flags.biases_before_norm is \"no\"; it must be true or false"},
      {"/flags/classes", json::array({"background"}),
       "flags.classes is [\"background\"]; it must be a list of 2 to 1000 class names"},
      {"/flags/classes", json::array({"background", ""}), "flags.classes[1] is \"\""},
      {"/flags/inputs", json::array(), "flags.inputs is []; it must be a list of 1 to 1000"},
      {"/flags/inputs", json::parse(R"([{"window": [0, 1]}])"),
       "flags.inputs[0] has no \"modality\""},
      {"/flags/inputs", json::parse(R"([{"modality": "CT", "window": [100, -100]}])"),
       "flags.inputs[0].window is [100,-100]; it must be [low, high] with low below high"},
      {"/flags/inputs", json::parse(R"([{"modality": "CT", "window": [0]}])"),
       "flags.inputs[0].window is [0]; it must be an array of 2"},
      {"/validation_mean_dice", 1.5,
       "validation_mean_dice is 1.5; it must be a number from 0 to 1"},
      {"/tensors", json::object(), "tensors is {}; it must be an array"},
      {"/tensors/0/file", "../../etc/passwd.npy",
       "tensors[0].file is \"../../etc/passwd.npy\"; it must be the name of a .npy file inside"},
      {"/tensors/0/file", "/abs/weight.npy", "tensors[0].file is \"/abs/weight.npy\""},
      {"/tensors/0/file", "weight.txt", "tensors[0].file is \"weight.txt\""},
      {"/tensors/0/name", "", "tensors[0].name is \"\"; it must be a non-empty string"},
      {"/tensors/0/dims", nullptr, "tensors[0] has no \"dims\""},
      {"/tensors/0/shape", json::array({3, 3, 3, 1}),
       "tensors[0].shape is [3,3,3,1]; it must be "
       "an array of 5"},
      {"/tensors/0/shape/4", 0, "tensors[0].shape[4] is 0; it must be an integer from 1"},
      {"/tensors/0/dims", json::array(),
       "tensors[0].shape is [3,3,3,1,4]; it must be an array of 0"},
      {"/tensors/0/dtype", "float16", "tensors[0].dtype is \"float16\"; it must be one of"},
      {"/tensors/0/kind", "weights", "tensors[0].kind is \"weights\"; it must be one of"},
  };
  for (const auto& spoiled : cases) {
    json manifest = good_manifest();
    const json::json_pointer at(spoiled.pointer);
    if (spoiled.value.is_null())
      manifest[at.parent_pointer()].erase(at.back());
    else
      manifest[at] = spoiled.value;
    INFO(spoiled.pointer << " = " << spoiled.value.dump());
    const std::string error = manifest_error(manifest);
    CHECK_THAT(error,
               Catch::StartsWith("ckpt/manifest.json: ") && Catch::Contains(spoiled.expected));
  }
  json twice = good_manifest();
  twice["tensors"].push_back(twice["tensors"][0]);
  CHECK_THAT(manifest_error(twice), Catch::Contains("tensors[1].name is \"down0.conv1.weight\"; it "
                                                    "must be a name no other tensor has"));
}

TEST_CASE("latest names a checkpoint directory beside it, nothing else") {
  CHECK(unet3d::checked_latest("checkpoint-000012", "ckpt/latest") == "checkpoint-000012");
  for (const char* bad : {"../checkpoint-000012", "checkpoint-1/../../x", "/tmp/checkpoint-1", "",
                          "..", "manifest.json"})
    CHECK_THROWS_WITH(unet3d::checked_latest(bad, "ckpt/latest"),
                      Catch::Contains("ckpt/latest: names \"" + std::string(bad) +
                                      "\"; it must name a checkpoint-NNNNNN directory"));
}

TEST_CASE(
    "a step's first non-finite number is named on every processor: the loss, else a gradient") {
  using namespace meshtensor;
  const float infinity = std::numeric_limits<float>::infinity();
  // `steep` (split over the processors) has a finite value and an infinite gradient: its map's
  // derivative is infinite. `scale` makes the loss itself NaN.
  const auto found = [&](float scale) {
    return testing::on_mesh("p:2", [&](Mesh& m) {
      nn::Parameters<float> parameters;
      auto fine = parameters.add("fine", full<float>(m, "a:4", "", 1.0f));
      auto steep = parameters.add("steep", full<float>(m, "a:4", "a:p", 1.0f));
      auto y = map(
          steep, [](float v) { return v; }, [&](float) { return infinity; });
      auto loss = reduce_sum(fine * scale) + reduce_sum(y);
      backward(loss);
      // What the training loop reads a step later: the loss, then the checks' parts.
      const unet3d::StepChecks checks = unet3d::step_checks(loss, parameters);
      std::vector<Tensor<float>> read{loss};
      read.insert(read.end(), checks.parts.begin(), checks.parts.end());
      auto later = read_later(read);
      const std::vector<float>& v = later.values();
      const std::string bad =
          unet3d::first_nonfinite(v[0], std::vector<float>(v.begin() + 1, v.end()), checks.names);
      return std::pair(bad, std::isfinite(checks.guard.item()));
    });
  };
  for (const auto& [bad, guard_finite] : found(2.0f)) {
    CHECK(bad == "the gradient of steep");
    CHECK_FALSE(guard_finite);  // the optimiser skips the step
  }
  for (const auto& [bad, guard_finite] : found(std::nanf(""))) {
    CHECK_THAT(bad, Catch::StartsWith("the loss (") && Catch::Contains("nan)"));
    CHECK_FALSE(guard_finite);
  }
}

namespace {

// A checkpoint directory whose `latest` holds `latest` and whose checkpoint-000001/manifest.json
// holds `manifest`; what read_manifest says of it.
std::string read_manifest_error(const std::string& latest, const std::string& manifest) {
  const fs::path dir = fs::temp_directory_path() / "meshtensor-test-manifest";
  fs::remove_all(dir);
  fs::create_directories(dir / "checkpoint-000001");
  std::ofstream(dir / "latest", std::ios::binary) << latest << '\n';
  if (manifest == "<directory>")
    fs::create_directories(dir / "checkpoint-000001" / "manifest.json");
  else
    std::ofstream(dir / "checkpoint-000001" / "manifest.json", std::ios::binary) << manifest;
  try {
    (void)unet3d::read_manifest(dir.string());
  } catch (const meshtensor::IoError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("a manifest file that nests deep, a latest with a NUL, a manifest that is a directory") {
  CHECK(read_manifest_error("checkpoint-000001", good_manifest().dump()) == "no error");
  // 200000 nested arrays overflowed the stack when the error printed them (found by fuzzing).
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  CHECK_THAT(read_manifest_error("checkpoint-000001", deep),
             Catch::Contains("manifest.json: arrays or objects nest more than 32 deep"));
  // A NUL ended the name the system saw: the directory checkpoint-000001 was read as JSON.
  CHECK_THAT(read_manifest_error(std::string("checkpoint-000001\0x", 19), "{}"),
             Catch::Contains("latest: names \"checkpoint-000001?x\"; it must name a checkpoint"));
  // A name longer than the system takes made the check for a file throw (found by fuzzing).
  CHECK_THAT(read_manifest_error("checkpoint-" + std::string(300, '0'), "{}"),
             Catch::Contains("manifest.json: missing; the checkpoint is incomplete or corrupted"));
  CHECK_THAT(read_manifest_error("checkpoint-000001", "<directory>"),
             Catch::Contains("manifest.json: missing; the checkpoint is incomplete or corrupted"));
}

namespace {

// Checks a gathered batch against the volumes' voxels, drawn one by one; counts the voxels of each
// class, so that a test can tell it saw more than background.
void check_batch_is_volumes(const xt::xarray<float>& input, const xt::xarray<float>& labels,
                            const unet3d::PhantomVolumes& volumes, std::array<int, 3>& seen) {
  for (std::size_t b = 0; b < input.shape()[0]; ++b)
    for (std::size_t x = 0; x < input.shape()[1]; ++x)
      for (std::size_t y = 0; y < input.shape()[2]; ++y)
        for (std::size_t z = 0; z < input.shape()[3]; ++z) {
          const auto v =
              volumes.at(std::int64_t(b), {std::int64_t(x), std::int64_t(y), std::int64_t(z)});
          REQUIRE(input(b, x, y, z, 0) == unet3d::network_input(v.hu));
          for (int c = 0; c < unet3d::num_classes; ++c)
            REQUIRE(labels(b, x, y, z, std::size_t(c)) == (v.label == c ? 1.0f : 0.0f));
          ++seen[std::size_t(v.label)];
        }
}

}  // namespace

TEST_CASE("phantom batches: the loader's worker draws each processor's blocks of the volumes") {
  using namespace meshtensor;
  const std::array<std::int64_t, 3> size{16, 12, 8};
  const std::int64_t batch = 2, steps = 3;
  for (const auto& [mesh, layout] :
       {std::pair{"rows:2; cols:2", "x:rows; y:cols"}, std::pair{"p:2", "batch:p"},
        std::pair{"p:3", "classes:p"}, std::pair{"p:1", ""}}) {
    CAPTURE(mesh, layout);
    // Steps 0, 1, 2 in turn, drawn a step ahead; then a run resumed at step 2 (drawn in line).
    const auto gathered = testing::on_mesh(mesh, [&](Mesh& m) {
      std::vector<std::pair<xt::xarray<float>, xt::xarray<float>>> batches;
      unet3d::PhantomLoader loader(m, layout, 7, batch, size, steps);
      for (std::int64_t step = 0; step < steps; ++step) {
        const auto b = loader.batch(step);
        batches.emplace_back(gather(b.input), gather(b.labels));
      }
      unet3d::PhantomLoader resumed(m, layout, 7, batch, size, steps);
      const auto b = resumed.batch(2);
      batches.emplace_back(gather(b.input), gather(b.labels));
      return batches;
    });
    std::array<int, 3> seen{};
    for (const auto& batches : gathered)
      for (std::size_t k = 0; k < batches.size(); ++k) {
        const std::int64_t step = k < std::size_t(steps) ? std::int64_t(k) : 2;
        check_batch_is_volumes(batches[k].first, batches[k].second,
                               unet3d::PhantomVolumes(7, "train", step * batch, batch, size), seen);
      }
    CHECK(seen[unet3d::organ] > 0);
    CHECK(seen[unet3d::background] > 0);
  }
}

// Checkpoints from before the convolutions a batch norm follows lost their biases keep them: such
// a checkpoint, its flags without "biases_before_norm", predicts as the model that wrote it did.
// (Dropped, each bias would shift its channel by bias / sqrt(running variance).)
TEST_CASE("a checkpoint whose convolutions have biases before the norms predicts as it did") {
  using namespace meshtensor;
  const fs::path dir = fs::temp_directory_path() / "meshtensor-test-biased-checkpoint";
  fs::remove_all(dir);
  const auto same = testing::on_mesh("p:2", [&](Mesh& m) {
    unet3d::ModelConfig biased;
    biased.depth = 1;
    biased.channels = 2;
    biased.biases_before_norm = true;
    unet3d::UNet net(m, biased);
    // Biases and running statistics away from their starting values, as training leaves them.
    for (const auto& entry : net.parameters().entries()) {
      const bool bias =
          entry.name.size() > 5 && entry.name.substr(entry.name.size() - 5) == "/bias";
      const bool mean = entry.name.find("running_mean") != std::string::npos;
      if (!bias && !mean) continue;
      auto tensor = entry.tensor;
      tensor.set_block(
          full(m, tensor.shape(), tensor.layout().layout(), bias ? 0.25f : 0.1f).release_local());
    }
    nn::Adam<float> adam(net.parameters().trainable(), 1e-3);
    json flags{{"depth", 1}, {"channels", 2}, {"norm", "batch"}, {"seed", 1}};
    unet3d::save_checkpoint(m, dir.string(), 1, net, adam, flags);
    const auto [manifest, where] = unet3d::read_manifest(dir.string());
    unet3d::UNet restored(m, unet3d::config_from(manifest["flags"]));
    unet3d::restore_checkpoint(m, manifest, where, restored, nullptr);
    // Today's model of the same flags has 16 fewer parameters: the 4 convolutions' biases.
    unet3d::ModelConfig unbiased = biased;
    unbiased.biases_before_norm = false;
    const std::int64_t dropped =
        restored.parameters().count() - unet3d::UNet(m, unbiased).parameters().count();
    const auto input = unet3d::make_batch(m, Layout("x:p"), 3, "validation", 0, 1, {8, 8, 8}).input;
    return dropped == 16 && restored(input, false).local() == net(input, false).local();
  });
  for (const bool s : same) CHECK(s);
  fs::remove_all(dir);
}
