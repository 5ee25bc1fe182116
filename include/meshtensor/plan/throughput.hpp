#pragma once
// How fast a processor's kernels run: per kernel family (FLOPs per second; copies: elements per
// second) and per convolution class, with so many compute threads, and what each kernel call costs
// beyond its kernel (the op around it, the tape, the pool). Measured on this machine by
// calibrate() (plan/calibrate.hpp) and kept as text in a cache file, or written by hand for a
// machine one does not have. A plan's counts (kernels/plan/counts.hpp) times it are the seconds a
// processor computes.

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "meshtensor/core/error.hpp"
#include "meshtensor/kernels/plan/counts.hpp"
#include "meshtensor/plan/settings_files.hpp"

namespace meshtensor {

/// This machine's CPU model, as /proc/cpuinfo names it ("unknown CPU" elsewhere).
inline std::string cpu_model() {
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      std::string name = line.substr(line.find(':') + 1);
      name.erase(0, name.find_first_not_of(' '));
      return name;
    }
  return "unknown CPU";
}

struct Throughput {
  using Family = kernels::plan::Family;
  using ConvClass = kernels::plan::ConvClass;
  static constexpr std::size_t families = kernels::plan::Counts::families;

  std::string machine = "unknown CPU";        // the CPU model, or a preset's name
  int threads = 1;                            // compute threads per processor it was measured with
  std::array<double, families> per_second{};  // 0: not measured
  std::array<double, ConvClass::count> conv_per_second{};  // 0: priced as the nearest class
  double seconds_per_call = 0;

  /// The seconds a processor with these kernels takes for `work`: each family's FLOPs (copies:
  /// elements; convolutions: by class) at its rate, and every call's cost beyond its kernel.
  double seconds(const kernels::plan::Counts& work) const {
    double total = work.copied_elements > 0 ? work.copied_elements / rate(Family::copy) : 0;
    for (std::size_t f = 0; f < families; ++f) {
      total += double(work.calls[f]) * seconds_per_call;
      if (Family(f) != Family::conv && Family(f) != Family::copy && work.flops[f] > 0)
        total += work.flops[f] / rate(Family(f));
    }
    for (std::size_t c = 0; c < ConvClass::count; ++c)
      if (work.conv_flops[c] > 0) total += work.conv_flops[c] / conv_rate(c);
    return total;
  }

  /// A family's rate; one never measured is refused, naming it.
  double rate(Family f) const {
    const double r = per_second[std::size_t(f)];
    if (r > 0) return r;
    throw Error("the kernel throughput of " + machine + " (" + std::to_string(threads) +
                " threads) has no rate for the " + kernels::plan::family_name(f) +
                " kernels; calibrate with a model that runs them");
  }

  /// A convolution class's rate: its own, else the nearest width measured of the same pass and
  /// taps, else of the same pass, else the family's.
  double conv_rate(std::size_t c) const {
    if (conv_per_second[c] > 0) return conv_per_second[c];
    double best = 0;
    int best_distance = 1 << 20;
    for (std::size_t o = 0; o < ConvClass::count; ++o) {
      if (conv_per_second[o] <= 0 || ConvClass::pass_of(o) != ConvClass::pass_of(c)) continue;
      const int distance = std::abs(ConvClass::width_of(o) - ConvClass::width_of(c)) +
                           (ConvClass::one_tap_of(o) != ConvClass::one_tap_of(c) ? 100 : 0);
      if (distance < best_distance) best = conv_per_second[o], best_distance = distance;
    }
    return best > 0 ? best : rate(Family::conv);
  }

  /// The same kernels with `n` threads instead: rates scaled by n / threads (an estimate: a
  /// calibration with n threads is better).
  Throughput with_threads(int n) const {
    Throughput t = *this;
    const double scale = double(n) / double(threads);
    for (auto& r : t.per_second) r *= scale;
    for (auto& r : t.conv_per_second) r *= scale;
    t.threads = n;
    return t;
  }

  /// As text: one "key value" line each, conv classes as "conv PASS TAPS WIDTH rate".
  std::string to_text() const {
    std::ostringstream out;
    out.precision(6);
    out << "# meshtensor kernel throughput: FLOP/s per family (copy: elements/s), per "
           "convolution class (pass, taps, fewest channels from), seconds per kernel call\n"
        << "machine " << machine << "\nthreads " << threads << "\nseconds_per_call "
        << seconds_per_call << "\n";
    for (std::size_t f = 0; f < families; ++f)
      if (per_second[f] > 0)
        out << "family " << kernels::plan::family_name(Family(f)) << " " << per_second[f] << "\n";
    for (std::size_t c = 0; c < ConvClass::count; ++c)
      if (conv_per_second[c] > 0)
        out << "conv " << pass_names[ConvClass::pass_of(c)] << " "
            << (ConvClass::one_tap_of(c) ? "1" : "many") << " " << (1 << ConvClass::width_of(c))
            << " " << conv_per_second[c] << "\n";
    return out.str();
  }

  /// Reads the file `path` in to_text()'s form; errors name `what` (a flag, the file's role), the
  /// file and the line.
  static Throughput from_file(const std::filesystem::path& path, const std::string& what) {
    return from_text(read_text_file(path, what), what + " " + path.string());
  }

  /// Reads to_text()'s form; `source` (a file name) is named in errors with the line.
  static Throughput from_text(const std::string& text, const std::string& source) {
    Throughput t;
    std::istringstream in(text);
    int number = 0;
    for (std::string line; std::getline(in, line);) {
      ++number;
      if (line.empty() || line[0] == '#') continue;
      try {
        t.read_line(line);
      } catch (const std::exception& e) {
        throw Error(source + ", line " + std::to_string(number) + " (\"" + line +
                    "\"): " + e.what());
      }
    }
    if (t.per_second[std::size_t(Family::conv)] <= 0)
      throw Error(source + ": no \"family conv\" rate; recalibrate to write a complete file");
    return t;
  }

 private:
  static constexpr const char* pass_names[] = {"forward", "backward_input", "backward_weight"};

  static double positive(std::istream& in, const char* what) {
    double v = 0;
    if (!(in >> v) || !std::isfinite(v) || v < 0)
      throw Error(std::string("expected a non-negative number for ") + what);
    return v;
  }
  void read_line(const std::string& line) {
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key == "machine") {
      std::getline(words >> std::ws, machine);
    } else if (key == "threads") {
      threads = int(positive(words, "threads"));
      if (threads < 1) throw Error("threads must be at least 1");
    } else if (key == "seconds_per_call") {
      seconds_per_call = positive(words, "seconds_per_call");
    } else if (key == "family") {
      const Family f = family_named(words);  // before the rate: it comes first
      per_second[std::size_t(f)] = positive(words, "a family's rate");
    } else if (key == "conv") {
      const std::size_t c = conv_class_named(words);
      conv_per_second[c] = positive(words, "a convolution class's rate");
    } else {
      throw Error("unknown key \"" + key +
                  "\"; valid keys are machine, threads, seconds_per_call, family and conv");
    }
  }
  static Family family_named(std::istream& in) {
    std::string name;
    in >> name;
    for (std::size_t f = 0; f < families; ++f)
      if (name == kernels::plan::family_name(Family(f))) return Family(f);
    throw Error("unknown kernel family \"" + name +
                "\"; valid: copy, elementwise, sum, norm, optimizer, conv, pool, resample");
  }
  static std::size_t conv_class_named(std::istream& in) {
    std::string pass, taps;
    long long width = 0;
    in >> pass >> taps >> width;
    int p = 0;
    while (p < ConvClass::passes && pass != pass_names[p]) ++p;
    if (p == ConvClass::passes)
      throw Error("unknown pass \"" + pass + "\"; valid: forward, backward_input, backward_weight");
    if (taps != "1" && taps != "many") throw Error("taps must be 1 or many, not \"" + taps + "\"");
    if (width < 1) throw Error("a width of at least 1 channel is needed");
    return ConvClass::of(ConvClass::Pass(p), taps == "1", width, width);
  }
};

}  // namespace meshtensor
