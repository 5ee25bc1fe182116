// Catch2 main for the threads builds of the tests, compiled once for all test executables.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
