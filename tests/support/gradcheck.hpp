#pragma once
// Finite-difference checks of gradients on one processor, in double precision.

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <meshtensor/autodiff/backward.hpp>
#include <meshtensor/meshtensor.hpp>

#include "support/blocks.hpp"

namespace meshtensor::testing {

/**
 * Compares the gradient backward() gives for each input of `f` (which maps the inputs to a scalar
 * tensor) with central differences. Returns "" when all agree within `tolerance` (relative, with an
 * absolute floor of `tolerance`), else the first disagreement.
 */
template <class F>
std::string gradcheck(const std::vector<Shape>& shapes, F&& f, double tolerance = 1e-6,
                      double step = 1e-6) {
  std::string failure;
  threads::run(MeshShape{}, [&](Mesh& mesh) {
    std::vector<Tensor<double>> inputs;
    for (std::size_t k = 0; k < shapes.size(); ++k)
      inputs.push_back(generate<double>(mesh, shapes[k], Layout{}, [k](const Index& i) {
                         return double(test_value(i, int(k) + 1));
                       }).set_requires_grad());
    auto loss = f(mesh, inputs);
    backward(loss);
    autodiff::NoGrad no_grad(mesh);
    for (std::size_t k = 0; k < inputs.size() && failure.empty(); ++k) {
      auto grad = inputs[k].grad();
      auto data = inputs[k].local();
      for (std::size_t i = 0; i < data.size(); ++i) {
        const double saved = data.data()[i];
        data.data()[i] = saved + step;
        const double up = f(mesh, inputs).item();
        data.data()[i] = saved - step;
        const double down = f(mesh, inputs).item();
        data.data()[i] = saved;
        const double numeric = (up - down) / (2 * step);
        const double analytic = grad.defined() ? grad.local().data()[i] : 0.0;
        if (!(std::abs(numeric - analytic) <= tolerance * std::max(1.0, std::abs(numeric)))) {
          std::ostringstream why;
          why << "input " << k << " " << shapes[k] << ", element " << i << ": backward gives "
              << analytic << ", finite differences " << numeric;
          failure = why.str();
          break;
        }
      }
    }
  });
  return failure;
}

}  // namespace meshtensor::testing
