// Every backward of the fp32 CpuBackend against float64 central differences of
// loss = sum(forward(x) * w), computed with the double instantiation of runtime/cpu/ops.h.
// Accumulated gradient buffers start from a random prior, so each check also proves +=
// semantics; the overwritten ones (matmul dinp, attention dqkv) start from NaN.
// The double instantiation's analytic backward (what the model's float64 tests use) is checked
// against the same references at a tolerance float64 can meet.
#include <catch2/catch.hpp>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ops.h"
#include "tests/unit/cpu/op_test_util.h"

namespace trainer::cpu::test {
namespace {

constexpr double kFloat64Tol = 1e-7;  // central differences with h = 1e-6 are good to ~1e-9

TEST_CASE("matmul_backward_matches_float64_finite_differences", "[cpu][grad]") {
  const bool with_bias = GENERATE(true, false);
  const int64_t N = 6, C = 5, OC = 4;
  auto inp = random_floats(N * C, 1), w = random_floats(OC * C, 2), b = random_floats(OC, 3);
  auto wout = random_floats(N * OC, 4);
  auto inp64 = to_double(inp), w64 = to_double(w), b64 = to_double(b), wout64 = to_double(wout);
  auto loss = [&] {
    std::vector<double> out(sz(N * OC));
    matmul_forward(out.data(), inp64.data(), w64.data(), with_bias ? b64.data() : nullptr, N, C,
                   OC);
    return dot(out, wout64);
  };
  const auto ref_inp = fd_gradient(inp64, loss), ref_w = fd_gradient(w64, loss);

  CpuBackend be;
  OverwrittenGrad dinp(inp.size());
  GradBuf dw(w.size(), 11), db(b.size(), 12);
  be.matmul_backward(dinp.t({N, C}), dw.t({OC, C}), with_bias ? db.t({OC}) : Tensor(),
                     tensor(wout, {N, OC}), tensor(inp, {N, C}), tensor(w, {OC, C}));
  INFO("with_bias = " << with_bias);
  check_gradient("dinp", dinp.values(), ref_inp);
  check_gradient("dweight", dw.added(), ref_w);
  const auto ref_b = fd_gradient(b64, loss);
  if (with_bias) check_gradient("dbias", db.added(), ref_b);

  std::vector<double> dinp64(inp.size()), dw64(w.size()), db64(b.size());
  matmul_backward(dinp64.data(), dw64.data(), with_bias ? db64.data() : nullptr, wout64.data(),
                  inp64.data(), w64.data(), N, C, OC);
  check_gradient("float64 dinp", dinp64, ref_inp, kFloat64Tol);
  check_gradient("float64 dweight", dw64, ref_w, kFloat64Tol);
  if (with_bias) check_gradient("float64 dbias", db64, ref_b, kFloat64Tol);
}

TEST_CASE("layernorm_backward_matches_float64_finite_differences", "[cpu][grad]") {
  const int64_t N = 4, C = 7;
  auto inp = random_floats(N * C, 20, -2, 2), w = random_floats(C, 21), b = random_floats(C, 22);
  auto wout = random_floats(N * C, 23);
  auto inp64 = to_double(inp), w64 = to_double(w), b64 = to_double(b), wout64 = to_double(wout);
  auto loss = [&] {
    std::vector<double> out(sz(N * C));
    layernorm_forward<double>(out.data(), nullptr, nullptr, inp64.data(), w64.data(), b64.data(), N,
                              C);
    return dot(out, wout64);
  };

  CpuBackend be;
  std::vector<float> out(sz(N * C)), mean(sz(N)), rstd(sz(N));
  be.layernorm_forward(tensor(out, {N, C}), tensor(mean, {N}), tensor(rstd, {N}),
                       tensor(inp, {N, C}), tensor(w, {C}), tensor(b, {C}));
  GradBuf dinp(inp.size(), 24), dw(w.size(), 25), db(b.size(), 26);
  be.layernorm_backward(dinp.t({N, C}), dw.t({C}), db.t({C}), tensor(wout, {N, C}),
                        tensor(inp, {N, C}), tensor(w, {C}), tensor(mean, {N}), tensor(rstd, {N}));
  const auto ref_inp = fd_gradient(inp64, loss), ref_w = fd_gradient(w64, loss);
  const auto ref_b = fd_gradient(b64, loss);
  check_gradient("dinp", dinp.added(), ref_inp);
  check_gradient("dweight", dw.added(), ref_w);
  check_gradient("dbias", db.added(), ref_b);

  std::vector<double> out64(out.size()), mean64(mean.size()), rstd64(rstd.size());
  std::vector<double> dinp64(inp.size()), dw64(w.size()), db64(b.size());
  layernorm_forward(out64.data(), mean64.data(), rstd64.data(), inp64.data(), w64.data(),
                    b64.data(), N, C);
  layernorm_backward(dinp64.data(), dw64.data(), db64.data(), wout64.data(), inp64.data(),
                     w64.data(), mean64.data(), rstd64.data(), N, C);
  check_gradient("float64 dinp", dinp64, ref_inp, kFloat64Tol);
  check_gradient("float64 dweight", dw64, ref_w, kFloat64Tol);
  check_gradient("float64 dbias", db64, ref_b, kFloat64Tol);
}

TEST_CASE("gelu_backward_matches_float64_finite_differences", "[cpu][grad]") {
  const int64_t n = 40;
  auto inp = random_floats(sz(n), 30, -4, 4), wout = random_floats(sz(n), 31);
  auto inp64 = to_double(inp), wout64 = to_double(wout);
  auto loss = [&] {
    std::vector<double> out(sz(n));
    gelu_forward(out.data(), inp64.data(), n);
    return dot(out, wout64);
  };
  CpuBackend be;
  GradBuf dinp(inp.size(), 32);
  be.gelu_backward(dinp.t({n}), tensor(inp, {n}), tensor(wout, {n}));
  const auto ref = fd_gradient(inp64, loss);
  check_gradient("dinp", dinp.added(), ref);

  std::vector<double> dinp64(inp.size());
  gelu_backward(dinp64.data(), inp64.data(), wout64.data(), n);
  check_gradient("float64 dinp", dinp64, ref, kFloat64Tol);
}

TEST_CASE("attention_backward_matches_float64_finite_differences", "[cpu][grad]") {
  // T 130: three of the GEMM path's 64-row blocks, the last one short (a smaller head count keeps
  // the central differences quick)
  const int64_t T = GENERATE(int64_t{5}, int64_t{130});
  const int64_t B = T > 64 ? 1 : 2, NH = T > 64 ? 1 : 2, HS = T > 64 ? 2 : 3, C = NH * HS;
  auto qkv = random_floats(sz(B * T * 3 * C), 40, -1.5, 1.5);
  auto wout = random_floats(sz(B * T * C), 41);
  auto qkv64 = to_double(qkv), wout64 = to_double(wout);
  auto loss = [&] {
    std::vector<double> out(sz(B * T * C)), att(sz(B * NH * T * T));
    attention_forward(out.data(), att.data(), qkv64.data(), B, T, C, NH);
    return dot(out, wout64);
  };
  CpuBackend be;
  std::vector<float> out(sz(B * T * C)), att(sz(B * NH * T * T));
  be.attention_forward(tensor(out, {B, T, C}), tensor(att, {B, NH, T, T}),
                       tensor(qkv, {B, T, 3 * C}), int(NH));
  OverwrittenGrad dqkv(qkv.size());
  be.attention_backward(dqkv.t({B, T, 3 * C}), tensor(wout, {B, T, C}), tensor(qkv, {B, T, 3 * C}),
                        tensor(out, {B, T, C}), tensor(att, {B, NH, T, T}), int(NH));
  const auto ref = fd_gradient(qkv64, loss);
  check_gradient("dqkv", dqkv.values(), ref);

  std::vector<double> out64(out.size()), att64(att.size()), dqkv64(qkv.size());
  attention_forward(out64.data(), att64.data(), qkv64.data(), B, T, C, NH);
  attention_backward(dqkv64.data(), wout64.data(), qkv64.data(), att64.data(), B, T, C, NH);
  check_gradient("float64 dqkv", dqkv64, ref, kFloat64Tol);
}

TEST_CASE("embedding_backward_matches_float64_finite_differences", "[cpu][grad]") {
  const int64_t B = 2, T = 4, C = 3, V = 5, maxT = 7, pos_offset = 2;
  std::vector<int32_t> tokens = {1, 3, 1, 0, 4, 4, 1, 2};  // repeats must accumulate
  auto wte = random_floats(sz(V * C), 50), wpe = random_floats(sz(maxT * C), 51);
  auto wout = random_floats(sz(B * T * C), 52);
  auto wte64 = to_double(wte), wpe64 = to_double(wpe), wout64 = to_double(wout);
  auto loss = [&] {
    std::vector<double> out(sz(B * T * C));
    embedding_forward(out.data(), tokens.data(), wte64.data(), wpe64.data(), pos_offset, B, T, C);
    return dot(out, wout64);
  };
  CpuBackend be;
  GradBuf dwte(wte.size(), 53), dwpe(wpe.size(), 54);
  be.embedding_backward(dwte.t({V, C}), dwpe.t({maxT, C}), tensor(wout, {B, T, C}),
                        tensor(tokens, {B, T}), pos_offset);
  const auto ref_wte = fd_gradient(wte64, loss), ref_wpe = fd_gradient(wpe64, loss);
  check_gradient("dwte", dwte.added(), ref_wte);
  check_gradient("dwpe", dwpe.added(), ref_wpe);

  std::vector<double> dwte64(wte.size()), dwpe64(wpe.size());
  embedding_backward(dwte64.data(), dwpe64.data(), wout64.data(), tokens.data(), pos_offset, B, T,
                     C);
  check_gradient("float64 dwte", dwte64, ref_wte, kFloat64Tol);
  check_gradient("float64 dwpe", dwpe64, ref_wpe, kFloat64Tol);
}

TEST_CASE("softmax_cross_entropy_gradient_matches_float64_finite_differences", "[cpu][grad]") {
  const int64_t N = 5, V = 7;
  const float dloss_scale = 1.0f / 4;  // mean over the 4 counted rows
  std::vector<int32_t> targets = {3, 0, -1, 6, 2};
  auto logits = random_floats(sz(N * V), 60, -3, 3);
  auto logits64 = to_double(logits);
  auto loss = [&] {
    std::vector<double> z = logits64, losses(sz(N));
    softmax_cross_entropy(z.data(), losses.data(), targets.data(), N, V, 0.0);
    double s = 0;
    for (double l : losses) s += l;
    return s * dloss_scale;
  };
  CpuBackend be;
  std::vector<float> dlogits = logits, losses(sz(N), -7.0f);
  be.softmax_cross_entropy(tensor(dlogits, {N, V}), tensor(losses, {N}), tensor(targets, {N}),
                           dloss_scale, V);
  const auto ref = fd_gradient(logits64, loss);
  check_gradient("dlogits", to_double(dlogits), ref);

  std::vector<double> dlogits64 = logits64, losses64(sz(N));
  softmax_cross_entropy(dlogits64.data(), losses64.data(), targets.data(), N, V,
                        double(dloss_scale));
  check_gradient("float64 dlogits", dlogits64, ref, kFloat64Tol);
  INFO("ignored row 2: loss " << losses[2]);
  CHECK(losses[2] == 0.0f);
  for (int64_t j = 0; j < V; ++j) CHECK(dlogits[sz(2 * V + j)] == 0.0f);
}

// Calling a backward twice on zeroed buffers gives exactly twice the gradient of one call for an
// accumulated gradient, and the same gradient again for an overwritten one (backend.h).
TEST_CASE("backward_called_twice_doubles_accumulated_gradients_and_repeats_overwritten_ones",
          "[cpu][grad]") {
  CpuBackend be;
  const int64_t N = 6, C = 8, OC = 4, B = 2, T = 3, NH = 2;
  auto x = random_floats(sz(N * C), 70), w = random_floats(sz(OC * C), 71);
  auto dy = random_floats(sz(N * OC), 72), dyc = random_floats(sz(N * C), 73);
  enum Kind { accumulated, overwritten };
  auto run_twice = [](const std::function<void()>& backward, std::vector<float>& g,
                      const std::string& name, Kind kind = accumulated) {
    std::fill(g.begin(), g.end(), 0.0f);
    backward();
    const std::vector<float> once = g;
    backward();
    std::vector<double> expected(once.begin(), once.end());
    if (kind == accumulated)
      for (double& v : expected) v *= 2;
    check_close(name, g, expected, 1e-6, 1e-7);
  };
  std::vector<float> dx(x.size()), dw(w.size()), db(sz(OC));
  auto mm = [&] {
    be.matmul_backward(tensor(dx, {N, C}), tensor(dw, {OC, C}), tensor(db, {OC}),
                       tensor(dy, {N, OC}), tensor(x, {N, C}), tensor(w, {OC, C}));
  };
  run_twice(mm, dx, "matmul dinp", overwritten);
  run_twice(mm, dw, "matmul dweight");
  run_twice(mm, db, "matmul dbias");

  auto lw = random_floats(sz(C), 74), lb = random_floats(sz(C), 75);
  std::vector<float> out(x.size()), mean(sz(N)), rstd(sz(N)), dlw(lw.size()), dlb(lb.size());
  be.layernorm_forward(tensor(out, {N, C}), tensor(mean, {N}), tensor(rstd, {N}), tensor(x, {N, C}),
                       tensor(lw, {C}), tensor(lb, {C}));
  auto ln = [&] {
    be.layernorm_backward(tensor(dx, {N, C}), tensor(dlw, {C}), tensor(dlb, {C}),
                          tensor(dyc, {N, C}), tensor(x, {N, C}), tensor(lw, {C}),
                          tensor(mean, {N}), tensor(rstd, {N}));
  };
  run_twice(ln, dx, "layernorm dinp");
  run_twice(ln, dlw, "layernorm dweight");
  run_twice(ln, dlb, "layernorm dbias");

  run_twice(
      [&] {
        be.gelu_backward(tensor(dx, {N, C}), tensor(x, {N, C}), tensor(dyc, {N, C}));
      },
      dx, "gelu dinp");

  auto qkv = random_floats(sz(B * T * 3 * C), 76), dqkv = qkv;
  std::vector<float> att(sz(B * NH * T * T)), aout(sz(B * T * C));
  be.attention_forward(tensor(aout, {B, T, C}), tensor(att, {B, NH, T, T}),
                       tensor(qkv, {B, T, 3 * C}), int(NH));
  run_twice(
      [&] {
        be.attention_backward(tensor(dqkv, {B, T, 3 * C}), tensor(dyc, {B, T, C}),
                              tensor(qkv, {B, T, 3 * C}), tensor(aout, {B, T, C}),
                              tensor(att, {B, NH, T, T}), int(NH));
      },
      dqkv, "attention dqkv", overwritten);

  std::vector<int32_t> tokens = {0, 2, 2, 1, 0, 3};
  std::vector<float> dwte(sz(4 * C)), dwpe(sz(T * C));
  auto emb = [&] {
    be.embedding_backward(tensor(dwte, {4, C}), tensor(dwpe, {T, C}), tensor(dyc, {B, T, C}),
                          tensor(tokens, {B, T}), 0);
  };
  run_twice(emb, dwte, "embedding dwte");
  run_twice(emb, dwpe, "embedding dwpe");
}

}  // namespace
}  // namespace trainer::cpu::test
