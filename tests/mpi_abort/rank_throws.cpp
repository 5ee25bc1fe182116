// One rank throws while the others wait in a collective for it. Under meshtensor::run the job must
// end (not hang) with a non-zero status and the rank's message on stderr.
#include <stdexcept>

#include <meshtensor/meshtensor.hpp>

int main(int argc, char** argv) {
  return meshtensor::run(argc, argv, "rows:2; cols:2", [](meshtensor::Mesh& mesh) {
    if (mesh.processor() == 2) throw std::runtime_error("deliberate failure on one rank");
    mesh.world().barrier();  // waits for processor 2 forever unless the job is aborted
  });
}
