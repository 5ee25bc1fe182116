// An outside program built against one of meshtensor's optional components without using it. The
// full program (main.cpp) runs against each component of the installed package; the other ways of
// taking meshtensor in (its build tree, add_subdirectory, FetchContent) need only show that the
// component's target resolves, brings its definition and include directories, and links and loads
// its libraries. Prints the components it was built with.
#include <cstdio>

#include <meshtensor/version.hpp>

int main() {
  std::printf("component consumer ok: meshtensor %s with%s%s%s\n", meshtensor::version,
#ifdef MESHTENSOR_WITH_MPI
              " mpi",
#else
              "",
#endif
#ifdef MESHTENSOR_WITH_ONEDNN
              " onednn",
#else
              "",
#endif
#ifdef MESHTENSOR_WITH_CUDA
              " cuda"
#else
              ""
#endif
  );
}
