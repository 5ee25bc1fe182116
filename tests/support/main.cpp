// Catch2 main for the threads builds of the tests, compiled once for all test executables.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cstdlib>

// Every collective of the tests is checked (comm/collective_call.hpp) unless the run says
// otherwise: two processors in different collectives fail with both named.
static const bool checking_collectives = [] {
  return setenv("MESHTENSOR_CHECK_COLLECTIVES", "1", /*overwrite=*/0) == 0;
}();
