// A program outside the meshtensor tree: sums a split tensor and checks the result.
#include <cstdio>

#include <meshtensor/meshtensor.hpp>

int main(int argc, char** argv) {
  return meshtensor::run(argc, argv, "p:2", [](meshtensor::Mesh& mesh) {
    auto t = meshtensor::generate<double>(
        mesh, "x:10", "x:p", [](const meshtensor::Index& i) { return double(i["x"]); });
    const double total = meshtensor::reduce_sum(t).item();
    if (total != 45.0) throw meshtensor::Error("consumer: wrong sum " + std::to_string(total));
    if (mesh.processor() == 0)
      std::printf("consumer ok on %s: sum %g\n", mesh.transport().c_str(), total);
  });
}
