// Page residency of managed memory on the emulated GPU (residency.hpp). GPU pages are mapped
// without access; a fault on one is the host taking it back (counted, with the stack that did)
// unless the GPU's own work is running, which may touch its pages: those open for the length of
// that work. Messages between ranks must then be copied by the ranks themselves (Open MPI's
// single-copy transfers would read another process's inaccessible pages), so tracking turns
// them off before MPI starts.
#include "residency.hpp"

#include "device.hpp"

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace emulated_gpu::residency {
namespace {

constexpr std::size_t page = 4096;

struct Region {
  std::size_t bytes;
  std::vector<unsigned char> on_gpu;  // per page
  bool device = false;                // cudaMalloc'd: the host may never touch it
};

using Stack = std::array<void*, 16>;

struct State {
  std::mutex mutex;  // not recursive: nothing holding it touches managed memory
  std::map<std::uintptr_t, Region> regions;  // by first byte
  std::vector<void*> opened;                 // GPU pages opened for the GPU's work
  std::map<Stack, long> takers;              // the stacks that took pages back, and how many
  std::map<Stack, long> racers;              // of those, the ones with GPU work still queued
  long pages_back = 0;
  long pages_raced = 0;
  struct sigaction previous {};
};

State& state() {
  static auto* s = new State();  // never destroyed: faults may come during exit
  return *s;
}

thread_local bool in_gpu_work = false;

// The region holding `at`, or null.
std::pair<const std::uintptr_t, Region>* region_of(std::uintptr_t at) {
  auto& regions = state().regions;
  auto after = regions.upper_bound(at);
  if (after == regions.begin()) return nullptr;
  auto& found = *std::prev(after);
  return at < found.first + found.second.bytes ? &found : nullptr;
}

std::map<void*, std::string> names_of(const std::vector<void*>& addresses);
std::string place_of(const Stack& stack, const std::map<void*, std::string>& names);

// The host read or wrote device memory: on a GPU a segmentation fault. Says where, and stops.
[[noreturn]] void host_touched_device_memory(std::uintptr_t at) {
  Stack stack{};
  backtrace(stack.data(), int(stack.size()));
  std::vector<void*> addresses;
  for (void* pc : stack)
    if (pc) addresses.push_back(pc);
  std::fprintf(stderr,
               "emulated GPU: the host touched GPU memory (from cudaMalloc) at %p, which on a GPU "
               "is a segmentation fault; at:\n  %s\n",
               reinterpret_cast<void*>(at), place_of(stack, names_of(addresses)).c_str());
  std::fflush(stderr);
  std::abort();
}

void on_fault(int signal, siginfo_t* info, void* context) {
  State& s = state();
  const auto at = reinterpret_cast<std::uintptr_t>(info->si_addr);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (auto* found = region_of(at)) {
      const std::size_t index = (at - found->first) / page;
      void* start = reinterpret_cast<void*>(found->first + index * page);
      if (found->second.device && !in_gpu_work) host_touched_device_memory(at);
      if (found->second.on_gpu[index]) {
        mprotect(start, page, PROT_READ | PROT_WRITE);
        if (in_gpu_work) {
          s.opened.push_back(start);
        } else {
          found->second.on_gpu[index] = 0;
          ++s.pages_back;
          Stack stack{};
          backtrace(stack.data(), int(stack.size()));
          ++s.takers[stack];
          if (work_queued()) {  // the host did not wait for the GPU before touching its memory
            ++s.pages_raced;
            ++s.racers[stack];
          }
        }
        return;
      }
    }
  }
  // Not a GPU page: the program's own fault, for whatever handled it before.
  sigaction(signal, &s.previous, nullptr);
  (void)context;
}

// Puts on_fault first in line for SIGSEGV, unless it is already; the handler found there gets
// the faults that are not the GPU's pages. Called before each page moves to the GPU, since a
// program may install its own handler after start-up (Catch2 does, for every test case).
void handle_faults() {
  struct sigaction current {};
  sigaction(SIGSEGV, nullptr, &current);
  if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == &on_fault) return;
  struct sigaction action {};
  action.sa_sigaction = &on_fault;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &state().previous);
}

// Starts tracking if asked, before main (and MPI_Init) runs.
struct Start {
  Start() {
    if (!tracking()) return;
    setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
    void* warm[1];
    backtrace(warm, 1);  // loads the unwinder now, not first in a signal handler
    handle_faults();
  }
} start;

// What addr2line says of `addresses` in the file holding them: "function" per address.
std::map<void*, std::string> names_of(const std::vector<void*>& addresses) {
  std::map<void*, std::string> names;
  std::map<std::string, std::vector<std::pair<void*, std::uintptr_t>>> by_file;
  char** symbols = backtrace_symbols(addresses.data(), int(addresses.size()));
  for (std::size_t i = 0; i < addresses.size(); ++i) {
    // "path(+0xoffset) [0xaddress]" or "path(symbol+0xoffset) [...]"
    const std::string text = symbols ? symbols[i] : "";
    const auto open = text.find('('), plus = text.find("(+0x");
    if (open == std::string::npos) continue;
    const std::string file = text.substr(0, open);
    if (plus != std::string::npos)
      by_file[file].push_back({addresses[i], std::strtoull(text.c_str() + plus + 2, nullptr, 16)});
    else
      names[addresses[i]] = text.substr(open + 1, text.find(')') - open - 1);
  }
  std::free(symbols);
  for (const auto& [file, entries] : by_file) {
    std::string command = "addr2line -C -f -e '" + file + "'";
    for (const auto& e : entries) {
      char hex[32];
      std::snprintf(hex, sizeof hex, " 0x%jx", std::uintmax_t(e.second - 1));
      command += hex;
    }
    FILE* pipe = popen(command.c_str(), "r");
    if (!pipe) continue;
    char line[4096];
    for (const auto& e : entries) {
      if (!std::fgets(line, sizeof line, pipe)) break;
      std::string function = line;
      function.erase(function.find_last_not_of('\n') + 1);
      if (!std::fgets(line, sizeof line, pipe)) break;
      std::string where = line;  // file:line, "??:0" in a program built without -g
      where.erase(where.find_last_not_of('\n') + 1);
      const auto include = where.find("include/meshtensor/");
      if (include != std::string::npos) where = where.substr(include + 19);
      names[e.first] = where.rfind("??", 0) == 0 ? function : function + " [" + where + "]";
    }
    pclose(pipe);
  }
  return names;
}

// A stack as the innermost few of meshtensor's functions on it.
std::string place_of(const Stack& stack, const std::map<void*, std::string>& names) {
  std::string place;
  int shown = 0;
  for (void* pc : stack) {
    if (!pc || shown == 4) break;
    const auto found = names.find(pc);
    if (found == names.end() || found->second.find("meshtensor::") == std::string::npos ||
        found->second.rfind("xt::", 0) == 0)  // xtensor's copies: who called them tells more
      continue;
    std::string name = found->second.substr(0, found->second.find('('));
    if (name.size() > 90) name = name.substr(0, 90) + "...";
    const auto where = found->second.rfind(" [");
    if (where != std::string::npos) name += found->second.substr(where);
    place += (shown++ ? "\n      < " : "") + name;
  }
  return place.empty() ? "(outside meshtensor)" : place;
}

}  // namespace

bool tracking() {
  static const bool on = std::getenv("MESHTENSOR_EMULATED_GPU_PAGES") != nullptr;
  return on;
}

void* map_managed(std::size_t bytes) {
  const std::size_t length = (std::max<std::size_t>(bytes, 1) + page - 1) / page * page;
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (tracking()) {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().regions[reinterpret_cast<std::uintptr_t>(p)] = {
        length, std::vector<unsigned char>(length / page)};
  }
  return p;
}

void* map_device(std::size_t bytes) {
  const std::size_t length = (std::max<std::size_t>(bytes, 1) + page - 1) / page * page;
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::memset(p, 0xFF, length);  // NaN floats and doubles
  handle_faults();
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().regions[reinterpret_cast<std::uintptr_t>(p)] = {
        length, std::vector<unsigned char>(length / page, 1), true};
  }
  mprotect(p, length, PROT_NONE);
  return p;
}

void unmap_managed(void* p, std::size_t bytes) {
  const std::size_t length = (std::max<std::size_t>(bytes, 1) + page - 1) / page * page;
  if (tracking()) {
    std::lock_guard<std::mutex> lock(state().mutex);
    state().regions.erase(reinterpret_cast<std::uintptr_t>(p));
  }
  munmap(p, length);
}

void to_gpu(const void* p, std::size_t bytes) {
  if (!tracking() || bytes == 0) return;
  handle_faults();
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const auto first = reinterpret_cast<std::uintptr_t>(p);
  auto* found = region_of(first);
  if (!found) return;
  const std::size_t begin = (first - found->first) / page;
  const std::size_t end =
      std::min(found->second.on_gpu.size(), (first + bytes - found->first + page - 1) / page);
  for (std::size_t i = begin; i < end; ++i) found->second.on_gpu[i] = 1;
  mprotect(reinterpret_cast<void*>(found->first + begin * page), (end - begin) * page, PROT_NONE);
}

void begin_gpu_work() {
  in_gpu_work = true;
  if (tracking()) handle_faults();  // a test framework may have put its own handler first since
}

void end_gpu_work() {
  in_gpu_work = false;
  if (!tracking()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  for (void* start : s.opened) {
    auto* found = region_of(reinterpret_cast<std::uintptr_t>(start));
    if (found &&
        found->second.on_gpu[(reinterpret_cast<std::uintptr_t>(start) - found->first) / page])
      mprotect(start, page, PROT_NONE);
  }
  s.opened.clear();
}

void print_summary() {
  if (!tracking()) return;
  State& s = state();
  std::map<Stack, long> takers, racers;
  long pages_back = 0, pages_raced = 0;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    takers = s.takers;
    racers = s.racers;
    pages_back = s.pages_back;
    pages_raced = s.pages_raced;
  }
  std::vector<void*> addresses;
  for (const auto& [stack, count] : takers)
    for (void* pc : stack)
      if (pc) addresses.push_back(pc);
  std::sort(addresses.begin(), addresses.end());
  addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
  const auto names = names_of(addresses);
  // The places of `stacks`, most pages first, as lines of the summary.
  const auto by_place = [&](const std::map<Stack, long>& stacks) {
    std::map<std::string, long> counts;
    for (const auto& [stack, count] : stacks) counts[place_of(stack, names)] += count;
    std::vector<std::pair<long, std::string>> places;
    for (const auto& [place, count] : counts) places.push_back({count, place});
    std::sort(places.rbegin(), places.rend());
    std::ostringstream lines;
    for (std::size_t i = 0; i < places.size() && i < 12; ++i)
      lines << "\n  " << places[i].first << " pages: " << places[i].second;
    return lines.str();
  };
  std::ostringstream out;
  out << "emulated GPU pages: the host took back " << pages_back << " pages ("
      << pages_back * page / (1 << 20) << " MiB) from the GPU";
  if (pages_back) out << "; by place:" << by_place(takers);
  out << "\nemulated GPU pages: the host touched " << pages_raced
      << " pages while GPU work was still queued (without waiting for it: a race on a GPU)";
  if (pages_raced) out << "; by place:" << by_place(racers);
  std::fprintf(stderr, "%s\n", out.str().c_str());
}

}  // namespace emulated_gpu::residency
