// The U-Net example's own input files as hostile input: pairs.csv as spreadsheets write it (a
// byte-order mark, quoted fields, CRLF), and checkpoint manifests against their schema (every
// key, type and range; file names inside the checkpoint; `latest` beside it). And numbers that go
// bad in a step: the first non-finite one is named on every processor.
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
#include "manifest.hpp"
#include "support/spmd.hpp"

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
  CHECK(fs::path(pairs[0].image).filename() == "scan 1.nii.gz");
  CHECK(fs::path(pairs[0].label).filename() == "labels, first.nii.gz");
  CHECK(fs::path(pairs[1].image).filename() == "plain.nii");
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

TEST_CASE("a manifest as the checkpoint writes it passes its schema") {
  CHECK(manifest_error(good_manifest()) == "no error");
  json older = good_manifest();
  older["optimizer"].erase("steps");  // written before Adam's step count was kept
  older["flags"].erase("class_weights");
  CHECK(manifest_error(older) == "no error");
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
      return unet3d::first_nonfinite(loss, parameters);
    });
  };
  for (const auto& bad : found(2.0f)) CHECK(bad == "the gradient of steep");
  for (const auto& bad : found(std::nanf("")))
    CHECK_THAT(bad, Catch::StartsWith("the loss (") && Catch::Contains("nan)"));
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
