// One rank throws while the others wait in a collective for it. Under meshtensor::run the job must
// end (not hang) with a non-zero status and the rank's message on stderr. With the argument
// `agreed`, every rank learns the failure (agree_on) and the job says it once.
#include <stdexcept>
#include <string>

#include <meshtensor/meshtensor.hpp>

int main(int argc, char** argv) {
  const bool agreed = argc > 1 && std::string(argv[1]) == "agreed";
  return meshtensor::run(argc, argv, "rows:2; cols:2", [&](meshtensor::Mesh& mesh) {
    if (agreed)
      meshtensor::agree_on(mesh, mesh.processor() == 2 ? "deliberate failure, learnt by all" : "");
    if (mesh.processor() == 2) throw std::runtime_error("deliberate failure on one rank");
    mesh.world().barrier();  // waits for processor 2 forever unless the job is aborted
  });
}
