// The transformer's layers — GELU, SiLU, layer and RMS norm, one_hot, embedding, integer-label
// cross-entropy, nn::Dense and its neighbours — give their formulas' (and PyTorch's) values and,
// on every layout class with the normalised, vocabulary or feed-forward dim split, one
// processor's results forward and backward.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <meshtensor/autodiff/backward.hpp>

#include "support/op_check.hpp"

using namespace meshtensor;
using namespace meshtensor::testing;
using Catch::Matchers::Contains;

// In a namespace of its own: test files share a program (tests/CMakeLists.txt).
namespace test_transformer_layers {

namespace {
const Shape tokens("batch:2, seq:5, model:12");

// Splits of batch, seq and the normalised dim (model), even, uneven and with empty blocks.
const std::vector<LayoutCase> model_cases = {
    {"one processor", "p:1", ""},
    {"replicated on 4 processors", "p:4", ""},
    {"model split 4 ways", "p:4", "model:p"},
    {"model split 8 ways (uneven)", "p:8", "model:p"},
    {"seq split 4 ways (uneven)", "p:4", "seq:p"},
    {"batch over rows, model over cols (2x2)", "rows:2; cols:2", "batch:rows; model:cols"},
    {"seq over rows, model over cols (2x4, uneven)", "rows:2; cols:4", "seq:rows; model:cols"},
    {"model over rows, cols unused (2x2)", "rows:2; cols:2", "model:rows"},
};

// Token ids 0..6 with two positions outside the vocabulary of 7 (-1 and 7: ignored).
Tensor<float> token_ids(Mesh& m, const Layout& l) {
  return generate<float>(m, "batch:2, seq:5", l, [](const Index& i) {
    if (i["batch"] == 1 && i["seq"] == 3) return -1.0f;
    if (i["batch"] == 0 && i["seq"] == 4) return 7.0f;
    return float((3 * i["batch"] + 2 * i["seq"]) % 7);
  });
}

// Splits of the vocabulary, the model dim, the feed-forward dim and the tokens' dims.
const std::vector<LayoutCase> vocab_cases = {
    {"one processor", "p:1", ""},
    {"vocab split 4 ways (uneven)", "p:4", "vocab:p"},
    {"model split 3 ways", "p:3", "model:p"},
    {"d_ff split 4 ways", "p:4", "d_ff:p"},
    {"batch over rows, d_ff over cols (2x2)", "rows:2; cols:2", "batch:rows; d_ff:cols"},
    {"batch over rows, vocab over cols (2x4)", "rows:2; cols:4", "batch:rows; vocab:cols"},
    {"seq over rows, model over cols (2x2)", "rows:2; cols:2", "seq:rows; model:cols"},
};

// The largest gap between a and b, relative with an absolute floor of 1e-15.
double gap(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-15); }
}  // namespace

TEST_CASE("gelu, its tanh form and silu give PyTorch's values and derivatives") {
  // torch.nn.functional.gelu / gelu(approximate="tanh") / silu in float64, and their gradients.
  const std::vector<double> x = {-4.0, -1.5, -0.75, -0.1, 0.0, 0.3, 1.0, 2.5, 6.0};
  const std::vector<std::vector<double>> want = {
      {-0.00012668496733247991, -0.10021080190328704, -0.16997051428265111, -0.046017216272297101,
       0, 0.1853734266566858, 0.84134474606854304, 2.4844758366855597, 5.9999999940804738},
      {-7.0245948192271257e-05, -0.10042842301976707, -0.17003944483437966, -0.046017248954564841,
       0, 0.18537092354275922, 0.84119199060827676, 2.4849157339100012, 5.9999999999156035},
      {-0.071944839848366235, -0.27363828570953452, -0.24061597561845527, -0.047502081252106004, 0,
       0.17233275504349771, 0.7310585786300049, 2.3103545499468914, 5.9851642610601923}};
  const std::vector<std::vector<double>> want_grad = {
      {-0.00050364966122642149, -0.1274691922299796, 0.00077427826076482964, 0.42047690797526982,
       0.5, 0.73232776682710987, 1.0833154705876864, 1.0376110859081451, 1.0000000354687093},
      {-0.00033512319712218684, -0.12771079315143308, 0.0010617438625856179, 0.42047821072824332,
       0.5, 0.73229545163880183, 1.0829640838457826, 1.0379515762126661, 1.0000000007709977},
      {-0.052664614891072908, -0.041294154299142946, 0.15740005550324651, 0.4500832085017708, 0.5,
       0.64778001031888288, 0.92767051187148686, 1.0994011113415267, 1.0123264325915249}};
  const auto got = on_one_processor([&](Mesh& m) {
    std::vector<std::vector<double>> out;
    for (int f = 0; f < 3; ++f) {
      auto t = generate<double>(m, "x:9", "", [&](const Index& i) { return x[i["x"]]; });
      t.set_requires_grad();
      const auto y = f == 0 ? gelu(t) : f == 1 ? gelu(t, GeluApproximation::tanh) : silu(t);
      backward(reduce_sum(y));
      out.push_back(std::vector<double>(y.local().begin(), y.local().end()));
      out.push_back(std::vector<double>(t.grad().local().begin(), t.grad().local().end()));
    }
    return out;
  });
  for (int f = 0; f < 3; ++f)
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("function " << f << " at x = " << x[i]);
      // PyTorch's 1 + erf and 1 + tanh lose digits for negative x (1.4e-12 at -4): ours do not.
      CHECK(gap(got[2 * f][i], want[f][i]) < 1e-11);
      CHECK(std::abs(got[2 * f + 1][i] - want_grad[f][i]) <
            1e-14 + 1e-11 * std::abs(want_grad[f][i]));
    }
}

TEST_CASE("layer_norm and rms_norm are their formulas over one or two dims") {
  const auto why = on_one_processor([](Mesh& m) {
    const auto x = test_input<double>(m, tokens, "", 1) * 3.0 + 0.5;
    const auto gamma = test_input<double>(m, "model:12", "", 2) + 1.0;
    const auto beta = test_input<double>(m, "model:12", "", 3);
    const auto ln = layer_norm(x, "model", gamma, beta).local();
    const auto ln2 = layer_norm(x, "seq, model", gamma, beta, 1e-3).local();
    const auto rn = rms_norm(x, "model", gamma).local();
    const auto xs = x.local();
    const auto g = gamma.local(), b = beta.local();
    for (int bi = 0; bi < 2; ++bi) {
      double all_sum = 0, all_squares = 0;
      for (int s = 0; s < 5; ++s)
        for (int d = 0; d < 12; ++d) all_sum += xs(bi, s, d);
      const double all_mean = all_sum / 60;
      for (int s = 0; s < 5; ++s)
        for (int d = 0; d < 12; ++d) all_squares += std::pow(xs(bi, s, d) - all_mean, 2);
      for (int s = 0; s < 5; ++s) {
        double sum = 0, squares = 0, raw_squares = 0;
        for (int d = 0; d < 12; ++d) sum += xs(bi, s, d);
        const double mean = sum / 12;
        for (int d = 0; d < 12; ++d) {
          squares += std::pow(xs(bi, s, d) - mean, 2);
          raw_squares += xs(bi, s, d) * xs(bi, s, d);
        }
        for (int d = 0; d < 12; ++d) {
          const double want_ln =
              (xs(bi, s, d) - mean) / std::sqrt(squares / 12 + 1e-5) * g(d) + b(d);
          const double want_ln2 =
              (xs(bi, s, d) - all_mean) / std::sqrt(all_squares / 60 + 1e-3) * g(d) + b(d);
          const double want_rn = xs(bi, s, d) / std::sqrt(raw_squares / 12 + 1e-6) * g(d);
          if (gap(ln(bi, s, d), want_ln) > 1e-12 || gap(ln2(bi, s, d), want_ln2) > 1e-12 ||
              gap(rn(bi, s, d), want_rn) > 1e-12)
            return "at batch " + std::to_string(bi) + ", seq " + std::to_string(s) + ", model " +
                   std::to_string(d);
        }
      }
    }
    return std::string();
  });
  CHECK(why == "");
}

TEST_CASE("gelu, silu, layer_norm and rms_norm match one processor with the normalised dim split") {
  CHECK(compare_with_one_processor(
            [](Mesh& m, const Layout& l) {
              auto x = test_input(m, tokens, l, 1).set_requires_grad();
              auto gamma = (test_input(m, "model:12", l, 2) + 1.0f).set_requires_grad();
              auto beta = test_input(m, "model:12", l, 3).set_requires_grad();
              auto scale = (test_input(m, "model:12", l, 4) + 1.0f).set_requires_grad();
              auto out = layer_norm(gelu(x * 2.0f), "model", gamma, beta) +
                         rms_norm(silu(x), "model", scale) +
                         layer_norm(gelu(x, GeluApproximation::tanh), "seq, model", gamma, beta);
              backward(reduce_sum(out * test_input(m, out.shape(), l, 5)));
              return std::vector<Tensor<float>>{out, x.grad(), gamma.grad(), beta.grad(),
                                                scale.grad()};
            },
            2e-5, model_cases) == "");
}

TEST_CASE("one_hot marks each id, and a row of zeros for ids outside the dim") {
  const auto hot =
      on_one_processor([](Mesh& m) { return one_hot(token_ids(m, ""), Dim("vocab", 7)).local(); });
  const auto ids = on_one_processor([](Mesh& m) { return token_ids(m, "").local(); });
  for (int b = 0; b < 2; ++b)
    for (int s = 0; s < 5; ++s)
      for (int v = 0; v < 7; ++v) CHECK(hot(b, s, v) == float(ids(b, s) == float(v)));
  CHECK(compare_with_one_processor(
            [](Mesh& m, const Layout& l) {
              return one_hot<double>(token_ids(m, l), Dim("vocab", 7), l);
            },
            0, vocab_cases) == "");
}

TEST_CASE("cross-entropy of class numbers is that of their one-hot labels, ignoring the rest") {
  const auto values = on_one_processor([](Mesh& m) {
    auto logits = test_input<double>(m, "batch:2, seq:5, vocab:7", "", 1) * 3.0;
    const auto ids = token_ids(m, "");
    const auto hot = one_hot(cast<double>(ids), Dim("vocab", 7));
    const auto weights = test_input<double>(m, "vocab:7", "", 2) + 1.0;
    // The 8 positions with a class, each weighed by its class's weight or by 1.
    const auto per_position = reduce_sum(hot * log_softmax(logits, "vocab"), "vocab");
    const double unweighted = -reduce_sum(per_position).item() / 8;
    const double weighted = -reduce_sum(hot * weights * log_softmax(logits, "vocab")).item() /
                            reduce_sum(hot * weights).item();
    return std::vector<double>{
        softmax_cross_entropy(logits, cast<double>(ids), "vocab").item(), unweighted,
        softmax_cross_entropy(logits, cast<double>(ids), "vocab", weights).item(), weighted};
  });
  CHECK(gap(values[0], values[1]) < 1e-14);
  CHECK(gap(values[2], values[3]) < 1e-14);
}

TEST_CASE("embedding and integer-label cross-entropy match one processor, table split or not") {
  CHECK(compare_with_one_processor(
            [](Mesh& m, const Layout& l) {
              auto table = test_input(m, "vocab:7, model:12", l, 3).set_requires_grad();
              const auto ids = token_ids(m, l);
              auto h = embedding(ids, table, "vocab");
              auto logits = einsum({h, table}, "batch, seq, vocab");  // tied output weights
              auto loss = softmax_cross_entropy(logits, ids, "vocab") +
                          reduce_sum(h * test_input(m, h.shape(), l, 4));
              backward(loss);
              return std::vector<Tensor<float>>{h, logits, loss, table.grad()};
            },
            1e-5, vocab_cases) == "");
  // Each position's vector is its token's row exactly; ignored ids give zeros.
  const auto why = on_one_processor([](Mesh& m) {
    const auto table = test_input(m, "vocab:7, model:12", "", 3);
    const auto h = embedding(token_ids(m, ""), table, "vocab").local();
    const auto ids = token_ids(m, "").local();
    const auto rows = table.local();
    for (int b = 0; b < 2; ++b)
      for (int s = 0; s < 5; ++s)
        for (int d = 0; d < 12; ++d) {
          const int id = int(ids(b, s));
          const float want = id >= 0 && id < 7 ? rows(id, d) : 0.0f;
          if (h(b, s, d) != want) return "position " + std::to_string(b) + ", " + std::to_string(s);
        }
    return std::string();
  });
  CHECK(why == "");
}

// A small decoder block's layers: embedding, layer norm, a feed-forward pair with GELU, a
// residual, RMS norm and a projection to the vocabulary; the parameters laid out as the case says.
std::vector<Tensor<float>> layers_step(Mesh& m, const Layout& l) {
  nn::Parameters<float> params;
  const Dim vocab("vocab", 7), model("model", 12), d_ff("d_ff", 8);
  nn::Embedding<float> embed(m, params, "embed", vocab, model, 1, l);
  nn::LayerNorm<float> norm(m, params, "norm", Shape{model}, 1e-5, l);
  nn::Dense<float> up(m, params, "up", model, d_ff, 2, true, l);
  nn::Dense<float> down(m, params, "down", d_ff, model, 3, false, l);
  nn::Dense<float> mix(m, params, "mix", model, model, 4, true, l);
  nn::RmsNorm<float> final_norm(m, params, "final", Shape{model}, 1e-6, l);
  nn::Dense<float> head(m, params, "head", model, vocab, 5, true, l);
  const auto ids = token_ids(m, l);
  auto x = embed(ids);
  x = x + down(gelu(up(norm(x))));
  x = x + mix(silu(x));
  auto loss = softmax_cross_entropy(head(final_norm(x)), ids, "vocab");
  backward(loss);
  std::vector<Tensor<float>> out{loss, x};
  for (const auto& p : params.trainable()) out.push_back(p.grad());
  return out;
}

TEST_CASE("nn::Embedding, LayerNorm, Dense and RmsNorm in a block match one processor") {
  CHECK(compare_with_one_processor(layers_step, 2e-5, vocab_cases) == "");
  const auto facts = on_one_processor([](Mesh& m) {
    nn::Parameters<float> params;
    nn::Dense<float> same(m, params, "same", Dim("model", 12), Dim("model", 12), 1);
    nn::Dense<float> plain(m, params, "plain", Dim("model", 12), Dim("d_ff", 8), 1, false);
    const auto x = test_input(m, tokens, "", 1);
    return std::vector<bool>{
        same(x).shape() == tokens,  // the weight's output dim renamed back to "model"
        same.weight().shape() == Shape("model:12, model_out:12"),
        plain(x).shape() == Shape("batch:2, seq:5, d_ff:8"), !plain.bias().defined(),
        reduce_max(abs(same.weight())).item() <= 1.0f / std::sqrt(12.0f)};
  });
  for (std::size_t k = 0; k < facts.size(); ++k) {
    INFO("fact " << k);
    CHECK(facts[k]);
  }
}

TEST_CASE("batch norm of features without spatial dims is the formula over the batch") {
  CHECK(compare_with_one_processor(
            [](Mesh& m, const Layout& l) {
              nn::Parameters<float> params;
              nn::Norm<float> norm(m, params, "bn", nn::NormKind::batch, Dim("model", 12));
              auto x = test_input(m, "batch:2, seq:5, model:12", l, 1).set_requires_grad();
              auto y = norm(x, true);
              backward(reduce_sum(y * test_input(m, y.shape(), l, 2)));
              return std::vector<Tensor<float>>{y, x.grad(), params["bn/gamma"].grad()};
            },
            2e-5, model_cases) == "");
}

TEST_CASE("the transformer layers' errors name the op, the dim and what would be valid") {
  auto errors = on_one_processor([](Mesh& m) {
    std::vector<std::string> what;
    const auto x = test_input(m, tokens, "", 1);
    const auto gamma = full<float>(m, "model:12", "", 1.0f);
    const std::vector<std::function<void()>> calls = {
        [&] { layer_norm(x, "modle", gamma, gamma); },
        [&] { layer_norm(x, "model", full<float>(m, "heads:12", "", 1.0f), gamma); },
        [&] { rms_norm(x, DimNames{}, gamma); },
        [&] { one_hot(token_ids(m, ""), Dim("seq", 7)); },
        [&] {
          embedding(token_ids(m, ""), full<float>(m, "vocab:7, model:4", "", 1.0f), "vocab_");
        },
        [&] {
          nn::Parameters<float> params;
          nn::Dense<float>(m, params, "ff", Dim("d_ff", 8), Dim("model", 12), 1)(x);
        },
        [&] {
          nn::Parameters<float> params;
          nn::Norm<float>(m, params, "in", nn::NormKind::instance, Dim("model", 12));
        },
        [&] { softmax_cross_entropy(x, full<float>(m, "batch:2, model:12", "", 1.0f), "model"); },
        [&] {
          softmax_cross_entropy(x, token_ids(m, ""), "model", full<float>(m, "seq:5", "", 1.0f));
        },
        [&] { soft_dice(x, full<float>(m, "batch:2, seq:5", "", 1.0f), "model"); },
    };
    for (const auto& call : calls) {
      try {
        call();
        what.push_back("no error");
      } catch (const Error& e) {
        what.push_back(e.what());
      }
    }
    return what;
  });
  CHECK_THAT(errors[0], Contains("layer_norm") && Contains("\"modle\"") && Contains("\"model\""));
  CHECK_THAT(errors[1], Contains("layer_norm") && Contains("gamma") && Contains("\"heads\""));
  CHECK_THAT(errors[2], Contains("rms_norm") && Contains("name the dims"));
  CHECK_THAT(errors[3], Contains("one_hot") && Contains("\"seq\""));
  CHECK_THAT(errors[4], Contains("embedding") && Contains("\"vocab_\"") && Contains("\"vocab\""));
  CHECK_THAT(errors[5], Contains("Dense ff") && Contains("\"d_ff\"") && Contains("8"));
  CHECK_THAT(errors[6], Contains("Norm in") && Contains("spatial dims"));
  CHECK_THAT(errors[7], Contains("softmax_cross_entropy: labels") && Contains("class numbers"));
  CHECK_THAT(errors[8], Contains("softmax_cross_entropy: class weights") && Contains("model=12"));
  CHECK_THAT(errors[9], Contains("soft_dice: labels"));
}

}  // namespace test_transformer_layers
