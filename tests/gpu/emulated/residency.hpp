#pragma once
// Where the pages of managed memory are, on the emulated GPU, when MESHTENSOR_EMULATED_GPU_PAGES is
// set: a page a GPU call reads or writes (a prefetch, a kernel's, cuDNN's, cuBLAS's or NCCL's
// operand) moves to the GPU, and is made inaccessible to the host; the host touching it then moves
// it back, and is counted, with the code that touched it. On a GPU each such move is a page fault
// and a transfer over the bus: host code that keeps touching what the GPU computes (an op that
// runs on the CPU in the middle of GPU work) costs that every step. A page a prefetch names is the
// GPU's from the call on; host code touching one while any GPU work is still queued did not wait
// for the GPU first, which on a GPU is a race with that work: those are counted apart. The counts
// and the places are printed at the process's end.
#include <cstddef>

namespace emulated_gpu::residency {

/// Whether pages are tracked (MESHTENSOR_EMULATED_GPU_PAGES set).
bool tracking();

/// Page-aligned managed memory of `bytes`, starting on the host; null when there is none.
void* map_managed(std::size_t bytes);
/// Gives back memory from map_managed.
void unmap_managed(void* p, std::size_t bytes);

/// Page-aligned device memory of `bytes` (tracking on), every byte 0xFF, which the host touching
/// outside the GPU's own work stops the program, as a segmentation fault would on a GPU; freed by
/// unmap_managed.
void* map_device(std::size_t bytes);

/// Moves the managed pages of [p, p + bytes) to the GPU (nothing for other memory).
void to_gpu(const void* p, std::size_t bytes);

/// Brackets the GPU's own work (a kernel, a library call run on the host): the pages it touches
/// are GPU pages, reachable only while it runs.
void begin_gpu_work();
void end_gpu_work();

/// Prints the pages the host took back, and the places that did, on stderr.
void print_summary();

}  // namespace emulated_gpu::residency
