#pragma once
// A kernel family's implementations as one ordered list of candidates (kernels/conv_candidates.hpp
// is one). Each candidate is a type with a `name`, `supports(problem)` — what it can run: shape,
// pass, element type, the CPU's instructions, the kernel policy — and `run(problem, operands)`.
// A problem runs on the first candidate that supports it, with two exceptions, both from the
// kernel policy: a candidate forced by name runs every problem it supports, and a candidate whose
// `races_next(problem)` is true is timed against the next one that supports the problem at the
// problem's first call on a processor, the faster running from then on.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "meshtensor/core/bfloat16.hpp"
#include "meshtensor/device/processor.hpp"

namespace meshtensor::kernels {

/// The element types kernels compute on, as a problem names them.
enum class Element { float32, bfloat16, float64 };

template <class T>
constexpr Element element_of() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, bfloat16> ||
                std::is_same_v<T, double>);
  if constexpr (std::is_same_v<T, float>) return Element::float32;
  if constexpr (std::is_same_v<T, bfloat16>) return Element::bfloat16;
  return Element::float64;
}

/// The candidates chosen for a problem: the one that runs it, and under a timed policy the one
/// raced against it (none: `rival == none`).
struct Selection {
  static constexpr std::size_t none = ~std::size_t{0};
  std::size_t chosen = none, rival = none;
  bool found() const { return chosen != none; }
};

template <class... Candidates>
struct CandidateList {
  static constexpr std::size_t size = sizeof...(Candidates);
  static constexpr std::array<std::string_view, size> names{Candidates::name...};

  /// The first candidate at or after `from` that supports p, or Selection::none.
  template <class Problem>
  static std::size_t first_supporting(const Problem& p, std::size_t from = 0) {
    std::size_t i = 0, found = Selection::none;
    ((found == Selection::none && i >= from && Candidates::supports(p) ? void(found = i) : void(),
      ++i),
     ...);
    return found;
  }

  template <class Problem>
  static bool supports(std::size_t index, const Problem& p) {
    return ask<bool>(index, [&](auto candidate) { return candidate.supports(p); });
  }

  template <class Problem>
  static bool races_next(std::size_t index, const Problem& p) {
    return ask<bool>(index, [&](auto candidate) { return candidate.races_next(p); });
  }

  /// f(candidate)'s answer for the candidate at `index` (a value of its type), R{} past the end.
  template <class R, class F>
  static R ask(std::size_t index, F&& f) {
    std::size_t i = 0;
    R answer{};
    ((i++ == index ? void(answer = f(Candidates{})) : void()), ...);
    return answer;
  }

  /// f(candidate) for the candidate at `index` (a value of its type).
  template <class F>
  static void visit(std::size_t index, F&& f) {
    std::size_t i = 0;
    ((i++ == index ? void(f(Candidates{})) : void()), ...);
  }

  static std::size_t index_of(std::string_view name) {
    for (std::size_t i = 0; i < size; ++i)
      if (names[i] == name) return i;
    return Selection::none;
  }

  static std::string listed() {
    std::string text;
    for (std::string_view name : names) text += (text.empty() ? "" : ", ") + std::string(name);
    return text;
  }

  /// The candidates for p: `forced` where it supports p (named by the setting `setting`), else
  /// the first that does, raced against the next under a timed policy.
  template <class Problem>
  static Selection select(const Problem& p, std::string_view forced, const char* setting) {
    if (!forced.empty()) {
      const std::size_t i = index_of(forced);
      if (i == Selection::none)
        throw std::invalid_argument(std::string(setting) + "=" + std::string(forced) +
                                    ": no such kernel; expected auto or one of " + listed());
      if (supports(i, p)) return {i, Selection::none};
    }
    return select_from(p, 0);
  }

  /// The same among the candidates at or after `from`, none forced.
  template <class Problem>
  static Selection select_from(const Problem& p, std::size_t from) {
    const std::size_t i = first_supporting(p, from);
    if (i == Selection::none || !races_next(i, p)) return {i, Selection::none};
    return {i, first_supporting(p, i + 1)};
  }
};

namespace detail {
template <class Run>
double seconds_of(Run&& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace detail

/// Which of a selection's two candidates runs the problem `key` names on this processor: raced at
/// its first call and remembered. run(index, trial) runs a candidate; a trial (a pass that adds
/// into its result adds into scratch then) runs each once to build and warm it, then three
/// interleaved rounds, each candidate's best time counting (one slow moment on a shared machine
/// should not decide); the chosen one wins a tie. Trials allocate from scratch memory, given back
/// when they end: the processor's pool would otherwise keep both candidates' buffers cached.
namespace detail {
// The races a processor has run: the winner per problem.
inline std::map<std::vector<std::int64_t>, std::size_t>& race_winners() {
  struct Winners {
    std::map<std::vector<std::int64_t>, std::size_t> by_problem;
  };
  return current_processor().state<Winners>().by_problem;
}
}  // namespace detail

/// The winner of the race `key` names on this processor, or Selection::none before it has run.
inline std::size_t race_winner(const std::vector<std::int64_t>& key) {
  const auto& winners = detail::race_winners();
  const auto known = winners.find(key);
  return known == winners.end() ? Selection::none : known->second;
}

template <class Run>
std::size_t raced(const std::vector<std::int64_t>& key, Selection s, Run&& run) {
  auto& winners = detail::race_winners();
  const auto known = winners.find(key);
  if (known != winners.end()) return known->second;
  const ScratchMemory trials;
  const auto seconds = [&](std::size_t i) { return detail::seconds_of([&] { run(i, true); }); };
  seconds(s.chosen), seconds(s.rival);
  double chosen = 1e300, rival = 1e300;
  for (int round = 0; round < 3; ++round) {
    rival = std::min(rival, seconds(s.rival));
    chosen = std::min(chosen, seconds(s.chosen));
  }
  return winners[key] = chosen <= rival ? s.chosen : s.rival;
}

}  // namespace meshtensor::kernels
