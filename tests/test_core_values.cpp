// Dim, Shape, MeshShape, Layout and LayoutSchedule: parsing the Mesh-TensorFlow syntax, printing,
// round trips, and the errors for bad input.
#include <catch2/catch.hpp>

#include <sstream>

#include <meshtensor/core/dim.hpp>
#include <meshtensor/core/dim_names.hpp>
#include <meshtensor/core/format.hpp>
#include <meshtensor/core/layout.hpp>
#include <meshtensor/core/layout_schedule.hpp>
#include <meshtensor/core/mesh_shape.hpp>
#include <meshtensor/core/shape.hpp>

using namespace meshtensor;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_core_values {
using Catch::Matchers::Contains;

template <class T>
std::string streamed(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

TEST_CASE("a shape parses from Mesh-TensorFlow syntax and equals the same dims built by hand") {
  Shape parsed("batch:2, x:256; y:128 ,z:64");
  Shape built{Dim{"batch", 2}, Dim{"x", 256}, Dim{"y", 128}, Dim{"z", 64}};
  CHECK(parsed == built);
  CHECK(parsed.rank() == 4);
  CHECK(parsed.num_elements() == 2 * 256 * 128 * 64);
  CHECK(parsed.position("y") == 2);
  CHECK(parsed.dim("z") == Dim{"z", 64});
  CHECK(parsed.names() == std::vector<std::string>{"batch", "x", "y", "z"});
  CHECK(Shape("") == Shape{});
  CHECK(Shape("x:3;") == Shape{Dim{"x", 3}});
  CHECK(Shape{}.num_elements() == 1);
}

TEST_CASE("shapes, dims, mesh shapes and layouts print and parse back to themselves") {
  const Shape shape("batch:2, x:256, y:256");
  CHECK(streamed(shape) == "[batch=2, x=256, y=256]");
  CHECK(fmt::format("{}", shape) == "[batch=2, x=256, y=256]");
  CHECK(fmt::format("{}", Dim{"x", 4}) == "x=4");

  const MeshShape mesh("rows:4;cols:2");
  CHECK(streamed(mesh) == "[rows=4, cols=2]");
  CHECK(fmt::format("{}", mesh) == "[rows=4, cols=2]");

  const Layout layout("x:rows;y:cols");
  CHECK(layout.to_string() == "x:rows; y:cols");
  CHECK(fmt::format("{}", layout) == "\"x:rows; y:cols\"");

  for (const char* text : {"", "x:rows", "x:rows; y:cols", "batch:a; x:b; y:c; z:d"})
    CHECK(Layout(Layout(text).to_string()) == Layout(text));
  for (const char* text : {"", "x:1", "batch:2, x:256, y:256", "a_b:7; c9:1"}) {
    Shape s(text);
    std::string round;  // "[a=1, b=2]" back to "a:1, b:2"
    for (const auto& d : s)
      round += (round.empty() ? "" : ", ") + d.name + ":" + std::to_string(d.size);
    CHECK(Shape(round) == s);
  }
  for (const char* text : {"", "p:8", "rows:4; cols:2", "a:2; b:2; c:2"}) {
    MeshShape m(text);
    std::string round;
    for (const auto& a : m)
      round += (round.empty() ? "" : "; ") + a.name + ":" + std::to_string(a.size);
    CHECK(MeshShape(round) == m);
  }
}

TEST_CASE("mesh coordinates are row-major and invert processor numbers") {
  const MeshShape mesh("rows:2; cols:4");
  CHECK(mesh.num_processors() == 8);
  CHECK(mesh.coord_of(5) == MeshCoord{1, 1});
  CHECK(mesh.coord_of(3) == MeshCoord{0, 3});
  for (int p = 0; p < mesh.num_processors(); ++p) CHECK(mesh.processor_of(mesh.coord_of(p)) == p);
  CHECK(MeshShape{}.num_processors() == 1);
  CHECK(MeshShape{}.coord_of(0).empty());
}

TEST_CASE("a layout maps dims to mesh axes and replicates the rest") {
  const Layout layout("x:rows; y:cols");
  CHECK(layout.mesh_axis_of("x") == "rows");
  CHECK(layout.mesh_axis_of("y") == "cols");
  CHECK_FALSE(layout.mesh_axis_of("z").has_value());
  CHECK(Layout{}.empty());
  CHECK(Layout({{"x", "rows"}, {"y", "cols"}}) == layout);
  // Two dims may name one mesh axis in a layout; only a tensor holding both is an error.
  CHECK_NOTHROW(Layout("x:rows; batch:rows"));
}

TEST_CASE(
    "a layout schedule gives each stage its layout, the last repeating, and names a bad stage") {
  const LayoutSchedule schedule("x:p | x:p; y:q |channels:p");
  CHECK(schedule.size() == 3);
  CHECK(schedule.at(0) == Layout("x:p"));
  CHECK(schedule.at(1) == Layout("x:p; y:q"));
  CHECK(schedule.at(2) == Layout("channels:p"));
  CHECK(schedule.at(7) == Layout("channels:p"));
  CHECK(schedule.to_string() == "x:p | x:p; y:q | channels:p");
  CHECK(LayoutSchedule(schedule.to_string()) == schedule);
  CHECK(LayoutSchedule("x:p | ").at(1).empty());  // a stage left empty replicates
  CHECK(LayoutSchedule().empty());
  CHECK_THROWS_WITH(LayoutSchedule().at(0), Contains("empty layout schedule"));
  CHECK_THROWS_WITH(LayoutSchedule("x:p | x:p, x:q"),
                    Contains("layout schedule \"x:p | x:p, x:q\", stage 1") &&
                        Contains("maps dim \"x\" to two mesh axes"));
  CHECK_THROWS_AS(LayoutSchedule("x:p | y"), ParseError);
}

TEST_CASE("dim names parse from a list or a string") {
  CHECK(DimNames("x, y;z").names() == std::vector<std::string>{"x", "y", "z"});
  CHECK(DimNames({"x", "y"}).contains("y"));
  CHECK(DimNames(Shape("a:1, b:2")).names() == std::vector<std::string>{"a", "b"});
  CHECK_THROWS_WITH(DimNames("x, x"), Contains("\"x\" is listed twice"));
}

TEST_CASE("malformed strings are rejected with a message that quotes them") {
  CHECK_THROWS_AS(Shape("x"), ParseError);
  CHECK_THROWS_WITH(Shape("x"), Contains("\"x\"") && Contains("has no ':'"));
  CHECK_THROWS_WITH(Shape("x:abc"), Contains("\"abc\"") && Contains("not a positive integer"));
  CHECK_THROWS_WITH(Shape("x:-2"), Contains("not a positive integer"));
  CHECK_THROWS_WITH(Shape("x:2,,y:3"), Contains("empty entry"));
  CHECK_THROWS_WITH(Shape("2x:4"), Contains("\"2x\"") && Contains("not a name"));
  CHECK_THROWS_WITH(Shape("x:"), Contains("no value"));
  CHECK_THROWS_AS(MeshShape("rows=4"), ParseError);
  CHECK_THROWS_WITH(MeshShape("rows:four"), Contains("mesh shape") && Contains("\"four\""));
  CHECK_THROWS_AS(Layout("x rows"), ParseError);
  CHECK_THROWS_WITH(Layout("x:"), Contains("layout") && Contains("no value"));
  CHECK_THROWS_WITH(Layout("x:3d"), Contains("\"3d\"") && Contains("not a mesh axis name"));
}

TEST_CASE("non-positive sizes and duplicate names are rejected, naming the dim") {
  CHECK_THROWS_AS(Dim("x", 0), ShapeError);
  CHECK_THROWS_WITH(Dim("x", 0), Contains("dim \"x\" has size 0"));
  CHECK_THROWS_WITH(Dim("x", -3), Contains("dim \"x\" has size -3"));
  CHECK_THROWS_WITH(Shape("x:0"), Contains("\"x\"") && Contains("must be positive"));
  CHECK_THROWS_WITH(Shape("x:2, y:3, x:4"), Contains("dim \"x\" appears twice"));
  CHECK_THROWS_WITH((Shape{Dim{"a", 1}, Dim{"a", 2}}), Contains("dim \"a\" appears twice"));
  CHECK_THROWS_WITH(MeshShape("rows:0"), Contains("\"rows\"") && Contains("between 1 and"));
  CHECK_THROWS_WITH(MeshShape("rows:2; rows:2"), Contains("mesh axis \"rows\" appears twice"));
  CHECK_THROWS_WITH((MeshShape{{"rows", -1}}), Contains("mesh axis \"rows\" has size -1"));
  CHECK_THROWS_WITH(Shape("x:2").position("y"), Contains("no dim \"y\"") && Contains("\"x\""));
}

TEST_CASE("one tensor dim on two mesh axes is rejected, naming the dim and both axes") {
  CHECK_THROWS_AS(Layout("x:rows; x:cols"), LayoutError);
  CHECK_THROWS_WITH(Layout("x:rows; x:cols"),
                    Contains("dim \"x\"") && Contains("\"rows\"") && Contains("\"cols\""));
  CHECK_THROWS_WITH(Layout({{"x", "rows"}, {"x", "cols"}}), Contains("two mesh axes"));
}

TEST_CASE(
    "sizes whose product overflows are errors naming the mesh or the dims, not small counts") {
  // 641 x 6700417 = 2^32 + 1: wrapped to an int it would count as one processor.
  CHECK_THROWS_AS(MeshShape("a:641; b:6700417"), MeshError);
  CHECK_THROWS_WITH(MeshShape("a:641; b:6700417"),
                    Contains("[a=641, b=6700417]") && Contains("overflows"));
  CHECK(MeshShape("a:4096; b:4096; c:127").num_processors() == 4096 * 4096 * 127);
  // 2^32 x 2^32 wraps a 64-bit count to 0.
  CHECK_THROWS_AS(Shape("x:4294967296, y:4294967296"), ShapeError);
  CHECK_THROWS_WITH(Shape("x:4294967296, y:4294967296"), Contains("overflows at dim \"y\""));
  CHECK(Shape("x:4294967296, y:2147483647").num_elements() == 4294967296LL * 2147483647LL);
}

}  // namespace test_core_values
