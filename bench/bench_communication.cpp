// Communication throughput of the transport the program is started on: all-reduce of growing
// vectors, and relayout of a volume between two split layouts (an all-to-all) and to replicated
// (an all-gather). Prints a Markdown table; figures are per processor. On the nccl transport it
// also reduces vectors in device memory, which NCCL uses in place (host vectors go through a copy).
//
//   bench_communication [--mesh "p:2"] [--repeats 5]
//   mpirun -np 4 bench_communication --mesh "p:4"
//   MESHTENSOR_TRANSPORT=nccl mpirun -np 4 bench_communication --mesh "p:4"   (one GPU per rank)

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <meshtensor/meshtensor.hpp>

#ifdef MESHTENSOR_WITH_CUDA
#include <cuda_runtime_api.h>

#include <meshtensor/device/cuda.hpp>
#endif

namespace mt = meshtensor;

namespace {

// Median seconds of `repeats` calls of f, all processors starting together.
template <class F>
double median_seconds(mt::Mesh& mesh, int repeats, F&& f) {
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    mesh.world().barrier();
    const auto start = std::chrono::steady_clock::now();
    f();
    mesh.world().barrier();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string mesh_text = "p:2";
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--mesh")
      mesh_text = argv[i + 1];
    else if (flag == "--repeats")
      repeats = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "bench_communication: unknown flag %s; valid: --mesh, --repeats\n",
                   flag.c_str());
      return 2;
    }
  }
  return mt::run(argc, argv, mesh_text, [&](mt::Mesh& mesh) {
    const bool print = mesh.processor() == 0;
    if (print) {
      std::printf("# meshtensor communication, %s transport, mesh %s\n\n", mesh.transport().c_str(),
                  mesh.shape().to_string().c_str());
      std::printf(
          "| operation | elements | median time (ms) | GB/s per processor |\n|---|---|---|---|\n");
    }
    for (std::size_t n :
         {std::size_t{1} << 10, std::size_t{1} << 16, std::size_t{1} << 20, std::size_t{1} << 23}) {
      std::vector<float> data(n, 1.0f);
      const double t = median_seconds(
          mesh, repeats, [&] { mt::all_reduce(mesh.world(), data, mt::ReduceOp::sum); });
      if (print)
        std::printf("| all_reduce sum | %zu | %.3f | %.2f |\n", n, t * 1e3,
                    n * sizeof(float) / t / 1e9);
#ifdef MESHTENSOR_WITH_CUDA
      if (mesh.transport() == "nccl") {
        float* device = nullptr;
        mt::cuda::check(cudaMalloc(&device, n * sizeof(float)), "cudaMalloc");
        mt::cuda::check(cudaMemcpy(device, data.data(), n * sizeof(float), cudaMemcpyHostToDevice),
                        "cudaMemcpy");
        const double on_device = median_seconds(mesh, repeats, [&] {
          mesh.world().all_reduce(device, n, mt::DType::f32, mt::ReduceOp::sum);
        });
        mt::cuda::check(cudaFree(device), "cudaFree");
        if (print)
          std::printf("| all_reduce sum (device memory) | %zu | %.3f | %.2f |\n", n,
                      on_device * 1e3, n * sizeof(float) / on_device / 1e9);
      }
#endif
    }
    const std::string axis = mesh.shape()[0].name;
    for (std::int64_t side : {32, 64, 128}) {
      const mt::Shape shape{mt::Dim{"x", side}, mt::Dim{"y", side}, mt::Dim{"z", side}};
      auto volume = mt::generate<float>(mesh, shape, "x:" + axis,
                                        [](const mt::Index& i) { return float(i["x"]); });
      const double moved = static_cast<double>(volume.local().size()) * sizeof(float);
      const double all_to_all =
          median_seconds(mesh, repeats, [&] { mt::relayout(volume, "y:" + axis); });
      const double all_gather = median_seconds(mesh, repeats, [&] { mt::relayout(volume, ""); });
      if (print) {
        std::printf("| relayout x→y split (all-to-all) | %lld³ | %.3f | %.2f |\n", (long long)side,
                    all_to_all * 1e3, moved / all_to_all / 1e9);
        std::printf("| relayout x split→replicated (all-gather) | %lld³ | %.3f | %.2f |\n",
                    (long long)side, all_gather * 1e3,
                    moved * mesh.num_processors() / all_gather / 1e9);
      }
    }
  });
}
