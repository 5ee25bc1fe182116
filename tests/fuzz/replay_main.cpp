// A main for the fuzz targets without libFuzzer, so that any compiler builds them and ctest runs
// their corpora in every test build: each file named (or in a directory named) goes through
// LLVMFuzzerTestOneInput once. An input that once crashed stays in the corpus and fails here if
// the bug comes back; a target fails its input by aborting, as under libFuzzer.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> inputs_of(int argc, char** argv) {
  std::vector<fs::path> inputs;
  for (int a = 1; a < argc; ++a) {
    if (!fs::is_directory(argv[a])) {
      inputs.emplace_back(argv[a]);
      continue;
    }
    for (const auto& entry : fs::directory_iterator(argv[a]))
      if (entry.is_regular_file()) inputs.push_back(entry.path());
  }
  std::sort(inputs.begin(), inputs.end());  // the same order every run
  return inputs;
}

void run(const fs::path& input) {
  std::ifstream in(input, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  std::printf("%s (%zu bytes)\n", input.c_str(), bytes.size());
  std::fflush(stdout);  // the last input named is the one that failed
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  const auto inputs = inputs_of(argc, argv);
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...: no inputs found\n", argv[0]);
    return 2;
  }
  for (const auto& input : inputs) run(input);
  std::printf("%zu inputs, every one parsed or refused as documented\n", inputs.size());
  return 0;
}
