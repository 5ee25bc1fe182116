// Processors that stall, return early or call other collectives than their peers. Under
// meshtensor::run each case must end the whole job by itself, with a message naming the op and
// the peer: run with MESHTENSOR_TIMEOUT set low, under mpirun -np 4.
//   stop-collective  processor 2 stops (SIGSTOP) while the others enter an all_reduce
//   stop-receive     processor 2 stops; processor 1 waits for a message from it
//   return-early     processor 1 returns from the run while the others enter a barrier
//   disagree         processor 1 broadcasts while the others all-reduce (run with
//                    MESHTENSOR_CHECK_COLLECTIVES=1)
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include <meshtensor/meshtensor.hpp>

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "stop-collective" && mode != "stop-receive" && mode != "return-early" &&
      mode != "disagree")
    return meshtensor::fail_before_run(
        argc, argv, "give the case: stop-collective, stop-receive, return-early or disagree", 2,
        "mpi_rank_stalls");
  return meshtensor::run(argc, argv, "p:4", [&](meshtensor::Mesh& mesh) {
    auto& world = mesh.world();
    const int me = mesh.processor();
    float value = 1;
    if (mode == "stop-collective" || mode == "stop-receive") {
      if (me == 2) std::raise(SIGSTOP);
      if (mode == "stop-collective") {
        world.all_reduce(&value, 1, meshtensor::DType::f32, meshtensor::ReduceOp::sum);
      } else if (me == 1) {
        world.irecv(&value, sizeof value, 2, 7).wait();
      } else {
        // Returns later than processor 1 gives up, so that its message is the one reported.
        std::this_thread::sleep_for(std::chrono::seconds(3));
      }
    } else if (mode == "return-early") {
      if (me != 1) world.barrier();
    } else if (me == 1) {
      world.broadcast(&value, sizeof value, 0);
    } else {
      world.all_reduce(&value, 1, meshtensor::DType::f32, meshtensor::ReduceOp::sum);
    }
  });
}
