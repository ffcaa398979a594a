// AdamW, reductions, bf16 rounding, memory (release included), make_backend, shape checks and
// thread-count determinism of the CpuBackend.
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <csignal>
#include <cstring>
#include <limits>

#include "runtime/core/check.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/ops.h"
#include "tests/unit/cpu/op_test_util.h"

namespace trainer::cpu::test {
namespace {

TEST_CASE("adamw_step_matches_hand_formula_in_double", "[cpu][optim]") {
  const int64_t n = 50;
  auto p = random_floats(sz(n), 1), g = random_floats(sz(n), 2);
  auto m = random_floats(sz(n), 3, -0.1f, 0.1f), v = random_floats(sz(n), 4, 0, 0.01f);
  AdamWParams hp;
  hp.lr = 1e-2f, hp.beta1 = 0.9f, hp.beta2 = 0.95f, hp.eps = 1e-8f, hp.weight_decay = 0.1f;
  hp.step = 3;
  hp.grad_scale = 0.625f;  // global-norm clipping's coefficient, applied as the update reads g
  std::vector<double> ep(sz(n)), em(sz(n)), ev(sz(n));
  const double b1 = hp.beta1, b2 = hp.beta2, gs = hp.grad_scale;
  for (size_t i = 0; i < sz(n); ++i) {
    em[i] = b1 * m[i] + (1 - b1) * gs * g[i];
    ev[i] = b2 * v[i] + (1 - b2) * gs * g[i] * gs * g[i];
    const double mhat = em[i] / (1 - std::pow(b1, 3)), vhat = ev[i] / (1 - std::pow(b2, 3));
    ep[i] = p[i] - double(hp.lr) *
                       (mhat / (std::sqrt(vhat) + double(hp.eps)) + double(hp.weight_decay) * p[i]);
  }
  auto p64 = to_double(p), g64 = to_double(g), m64 = to_double(m), v64 = to_double(v);
  adamw_step<double>(p64.data(), g64.data(), m64.data(), v64.data(), n, hp.lr, hp.beta1, hp.beta2,
                     hp.eps, hp.weight_decay, hp.step, double(hp.grad_scale));
  check_close("float64 params", p64, ep, 1e-14, 1e-15);
  check_close("float64 m", m64, em, 1e-14, 1e-15);
  check_close("float64 v", v64, ev, 1e-14, 1e-15);

  CpuBackend().adamw_step(tensor(p, {n}), tensor(g, {n}), tensor(m, {n}), tensor(v, {n}), hp);
  check_close("params", p, ep, 1e-6, 1e-7);
  check_close("m", m, em, 1e-6, 1e-8);
  check_close("v", v, ev, 1e-5, 1e-10);
}

TEST_CASE("bf16_rounding_gives_known_bit_patterns", "[cpu][bf16]") {
  struct Case {
    uint32_t in;
    uint16_t out;
    const char* what;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3f80, "1.0 exact"},
      {0x3f808000u, 0x3f80, "tie, even below: stays"},
      {0x3f818000u, 0x3f82, "tie, odd below: rounds up to even"},
      {0x3f808001u, 0x3f81, "just above a tie: up"},
      {0x3f807fffu, 0x3f80, "just below a tie: down"},
      {0xbf818000u, 0xbf82, "negative tie to even"},
      {0x80000000u, 0x8000, "-0 keeps its sign"},
      {0x00000001u, 0x0000, "smallest denormal to +0"},
      {0x7f800000u, 0x7f80, "+inf"},
      {0xff800000u, 0xff80, "-inf"},
      {0x7f7fffffu, 0x7f80, "largest float overflows to inf"},
      {0x7fc00000u, 0x7fc0, "quiet NaN"},
      {0xffc00000u, 0xffc0, "negative quiet NaN"},
  };
  for (const Case& c : cases) {
    const uint16_t got = bf16_bits_from_float(std::bit_cast<float>(c.in));
    INFO(c.what << ": 0x" << std::hex << c.in << " -> 0x" << got << ", expected 0x" << c.out);
    CHECK(got == c.out);
  }
  // NaNs whose payload lives only in the low bits must not become infinities.
  for (uint32_t nan : {0x7f800001u, 0xff800001u, 0x7f80ffffu}) {
    const float r = round_to_bf16(std::bit_cast<float>(nan));
    INFO("NaN 0x" << std::hex << nan << " -> " << r);
    CHECK(std::isnan(r));
    CHECK(std::signbit(r) == bool(nan >> 31));
  }
}

// The nearest bf16 by exact distance (ties to the even mantissa), for finite inputs.
float nearest_bf16_reference(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const float lo = std::bit_cast<float>(u & 0xffff0000u);
  const float hi = std::bit_cast<float>((u & 0xffff0000u) + 0x10000u);
  const double dlo = std::abs(double(f) - lo), dhi = std::abs(double(f) - hi);
  if (dlo != dhi) return dlo < dhi ? lo : hi;
  return ((u >> 16) & 1u) ? hi : lo;
}

TEST_CASE("round_to_bf16_picks_the_nearest_bf16_for_random_floats", "[cpu][bf16]") {
  auto x = random_floats(2000, 5, -1e4f, 1e4f);
  for (size_t i = 0; i < 200; ++i)  // exact ties, built from random bf16 values
    x[i] = std::bit_cast<float>((std::bit_cast<uint32_t>(x[i]) & 0xffff0000u) | 0x8000u);
  std::vector<float> rounded(x.size());
  std::vector<uint16_t> bits(x.size());
  const int64_t n = int64_t(x.size());
  CpuBackend be;
  be.round_to_bf16(tensor(rounded, {n}), tensor(x, {n}));
  be.round_to_bf16(Tensor(bits.data(), {n}, DType::bf16), tensor(x, {n}));
  std::vector<float> expect(x.size());
  for (size_t i = 0; i < x.size(); ++i) expect[i] = nearest_bf16_reference(x[i]);
  check_close("f32-stored bf16", rounded, expect, 0, 0);
  std::vector<float> from_bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) from_bits[i] = float_from_bf16_bits(bits[i]);
  check_close("bf16-stored bits", from_bits, expect, 0, 0);
}

TEST_CASE("sum_squares_and_sum_match_long_double_reference", "[cpu][reduce]") {
  const int64_t n = 100003;  // several reduction chunks and a ragged tail
  auto x = random_floats(sz(n), 6, -3, 3);
  long double s2 = 0, s1 = 0;
  for (float v : x) s2 += (long double)v * v, s1 += v;
  CpuBackend be;
  const double got2 = be.sum_squares(tensor(x, {n})), got1 = be.sum(tensor(x, {n}));
  INFO("sum_squares " << got2 << " vs " << double(s2) << "; sum " << got1 << " vs " << double(s1));
  CHECK(std::abs(got2 - double(s2)) <= 1e-12 * double(s2));
  CHECK(std::abs(got1 - double(s1)) <= 1e-9);
  const auto x64 = to_double(x);
  CHECK(std::abs(sum_squares(x64.data(), n) - double(s2)) <= 1e-12 * double(s2));
}

TEST_CASE("scale_and_axpy_match_elementwise_formula", "[cpu][reduce]") {
  const int64_t n = 33;
  auto x = random_floats(sz(n), 7), y = random_floats(sz(n), 8);
  std::vector<double> expect(sz(n));
  for (size_t i = 0; i < sz(n); ++i) expect[i] = double(y[i]) * 0.5 + 3.0 * double(x[i]);
  CpuBackend be;
  be.scale(tensor(y, {n}), 0.5f);
  be.axpy(tensor(y, {n}), tensor(x, {n}), 3.0f);
  check_close("0.5 y + 3 x", y, expect, 1e-6, 1e-7);
}

TEST_CASE("memory_ops_allocate_aligned_and_round_trip", "[cpu][memory]") {
  CpuBackend be;
  const int64_t n = 37;
  void* p = be.alloc(sz(n) * 4);
  void* q = be.alloc(sz(n) * 4);
  INFO("alloc returned " << p << " and " << q);
  CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
  CHECK(reinterpret_cast<uintptr_t>(q) % 64 == 0);
  Tensor a(p, {n}), b(q, {n});
  auto src = random_floats(sz(n), 9);
  be.from_host(a, src.data());
  be.copy(b, a);
  std::vector<float> back(sz(n));
  be.to_host(back.data(), b);
  CHECK(back == src);
  be.zero(b);
  be.to_host(back.data(), b);
  CHECK(back == std::vector<float>(sz(n), 0.0f));
  be.free(p);
  be.free(q);
}

TEST_CASE("an_allocation_the_machine_cannot_give_says_how_many_bytes", "[cpu][memory]") {
  CpuBackend be;
  const size_t huge = size_t{1} << 60;  // an exbibyte: no machine's
  CHECK_THROWS_AS(be.alloc(huge), std::bad_alloc);
  CHECK_THROWS_WITH(be.alloc(huge),
                    "cpu backend: cannot allocate 1152921504606846976 bytes "
                    "(1099511627776 MiB) of host memory");
}

// The cpu backend's memory is the process's: the report's peak per rank is then the host's RSS.
TEST_CASE("cpu_backend_has_no_device_peak_of_its_own", "[cpu][memory]") {
  CHECK_FALSE(CpuBackend().peak_device_bytes().has_value());
}

TEST_CASE("release_returns_whole_pages_and_fills_the_edges", "[cpu][memory]") {
  CpuBackend be;
  const int64_t n = 1 << 20;  // 4 MiB: many whole pages
  Tensor t(be.alloc(sz(n) * 4), {n});
  auto src = random_floats(sz(n), 3);
  be.from_host(t, src.data());
  const int64_t before = be.resident_bytes(t);
  CHECK(before == static_cast<int64_t>(t.nbytes()));  // just written: every page is in memory
  const int64_t lo = 1001, hi = n - 999;              // not on page boundaries
  be.release(t.slice(lo, hi - lo), std::numeric_limits<float>::quiet_NaN());
  const int64_t after = be.resident_bytes(t);
  INFO("resident bytes " << before << " -> " << after);
  CHECK(after < before - static_cast<int64_t>(sz(hi - lo) * 4) + 3 * 4096);
  const float* p = t.f32();
  for (int64_t i = 0; i < n; ++i) {
    INFO("element " << i);
    const float v = p[i];
    if (i < lo || i >= hi)
      REQUIRE(v == src[sz(i)]);  // outside the range: kept
    else
      REQUIRE((std::isnan(v) || v == 0.0f));  // the fill where a page is shared, else a freed page
  }
  CHECK(std::isnan(p[lo]));  // the range's first element shares its page with live data
  CHECK(std::isnan(p[hi - 1]));
  be.free(t.data);
}

TEST_CASE("release_of_a_bf16_range_returns_its_pages_and_fills_the_edges", "[cpu][memory]") {
  CpuBackend be;              // ZeRO-3's release of a unit's bf16 weight copy
  const int64_t n = 1 << 21;  // 4 MiB of bf16
  Tensor t(be.alloc(sz(n) * 2), {n}, DType::bf16);
  std::vector<uint16_t> src(sz(n));
  for (int64_t i = 0; i < n; ++i) src[sz(i)] = static_cast<uint16_t>(0x3f80 + i % 97);
  be.from_host(t, src.data());
  const int64_t before = be.resident_bytes(t);
  const int64_t lo = 1001, hi = n - 999;  // not on page boundaries
  be.release(t.slice(lo, hi - lo), std::numeric_limits<float>::quiet_NaN());
  const int64_t after = be.resident_bytes(t);
  INFO("resident bytes " << before << " -> " << after);
  CHECK(after < before - static_cast<int64_t>(sz(hi - lo) * 2) + 3 * 4096);
  const auto* p = static_cast<const uint16_t*>(t.data);
  for (int64_t i = 0; i < n; ++i) {
    INFO("element " << i);
    if (i < lo || i >= hi)
      REQUIRE(p[i] == src[sz(i)]);  // outside the range: kept
    else  // the fill (a bf16 NaN) where a page is shared, else a freed page (0)
      REQUIRE((std::isnan(float_from_bf16_bits(p[i])) || p[i] == 0));
  }
  CHECK(std::isnan(float_from_bf16_bits(p[lo])));
  CHECK(std::isnan(float_from_bf16_bits(p[hi - 1])));
  be.free(t.data);
}

// Whether writing one float at `p` kills a forked child with SIGSEGV.
bool write_faults(float* p) {
  const pid_t child = fork();
  if (child == 0) {
    *static_cast<volatile float*>(p) = 1.0f;
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

TEST_CASE("fault_released_makes_released_pages_fault_until_acquired", "[cpu][memory]") {
  CpuBackend be(/*fault_released=*/true);  // what a run under TRAINER_TEST_FAULT_RELEASED=1 gets
  const int64_t n = 1 << 20;
  Tensor t(be.alloc(sz(n) * 4), {n});
  auto src = random_floats(sz(n), 5);
  be.from_host(t, src.data());
  const int64_t lo = 1001, hi = n - 999, mid = n / 2;
  be.release(t.slice(lo, hi - lo), std::numeric_limits<float>::quiet_NaN());
  float* p = t.f32();
  CHECK(std::isnan(p[lo]));  // a page shared with live data: filled, still usable
  CHECK(std::isnan(p[hi - 1]));
  CHECK(p[lo - 1] == src[sz(lo - 1)]);
  CHECK(write_faults(p + mid));  // a whole page inside: gone
  CHECK_FALSE(write_faults(p + lo));
  // releasing again over it (ZeRO's next step releases every unit) leaves it as it is
  be.release(t.slice(lo, hi - lo), 0.0f);
  CHECK(write_faults(p + mid));
  be.acquire(t.slice(mid, 1));  // one element: its whole page comes back, reading 0
  CHECK_FALSE(write_faults(p + mid));
  CHECK(p[mid] == 0.0f);
  CHECK(write_faults(p + mid + 4096 / 4));  // the next page is still released
  be.acquire(t);
  CHECK(p[mid + 4096 / 4] == 0.0f);
  be.release(t.slice(lo, hi - lo), 0.0f);
  be.free(t.data);  // with released pages in it: they come back for the allocator first
  Tensor u(be.alloc(sz(n) * 4), {n});
  be.zero(u);  // (the allocator may hand the same pages out again)
  be.free(u.data);
  // Released from the start (ZeRO's gradients): no whole page usable until acquired, then 0.
  Tensor g(be.alloc_released(sz(n) * 4), {n});
  CHECK(write_faults(g.f32() + mid));
  be.acquire(g.slice(mid, 1));
  CHECK(g.f32()[mid] == 0.0f);
  be.free(g.data);
}

TEST_CASE("make_backend_gives_cpu_and_explains_the_others", "[cpu][factory]") {
  auto be = make_backend("cpu", 0);
  CHECK(be->name() == "cpu");
  CHECK(be->device() == DeviceType::cpu);
  // Without a usable cuda backend (not built, or built but no device) asking for it says why.
  if (!cuda_backend_available())
    CHECK_THROWS_WITH(make_backend("cuda", 0),
                      Catch::Contains("not built") || Catch::Contains("no CUDA device"));
  CHECK_THROWS_WITH(make_backend("tpu", 0),
                    Catch::Contains("unknown backend 'tpu'") && Catch::Contains("cpu"));
}

TEST_CASE("ops_reject_mismatched_shapes_naming_the_op", "[cpu][checks]") {
  CpuBackend be;
  std::vector<float> x(12), w(12), out(12);
  std::vector<int32_t> tok = {0, 1, 9};
  CHECK_THROWS_WITH(
      be.matmul_forward(tensor(out, {3, 4}), tensor(x, {3, 4}), tensor(w, {4, 3}), Tensor()),
      Catch::Contains("matmul_forward"));
  CHECK_THROWS_WITH(be.embedding_forward(tensor(out, {1, 3, 2}), tensor(tok, {1, 3}),
                                         tensor(w, {6, 2}), Tensor(), 0),
                    Catch::Contains("embedding_forward") && Catch::Contains("tokens[2] = 9"));
  CHECK_THROWS_WITH(be.attention_forward(tensor(out, {1, 2, 6}), tensor(x, {1, 1, 2, 2}),
                                         tensor(w, {1, 2, 6}), 4),
                    Catch::Contains("attention_forward"));
  CHECK_THROWS_AS(be.gelu_forward(tensor(out, {12}), tensor(tok, {3})), CheckError);
}

// Runs fn with 1 thread and with 4 threads; the outputs must be bitwise equal.
template <class Fn>
void check_thread_count_invariance(const std::string& name, Fn fn) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one = fn();
  omp_set_num_threads(4);
  const std::vector<float> four = fn();
  omp_set_num_threads(saved);
  INFO(name << " differs between 1 and 4 threads");
  CHECK(std::memcmp(one.data(), four.data(), one.size() * sizeof(float)) == 0);
}

TEST_CASE("parameter_gradients_do_not_depend_on_thread_count", "[cpu][determinism]") {
  CpuBackend be;
  const int64_t N = 96, C = 256, V = 11;  // above the threading threshold
  auto x = random_floats(sz(N * C), 10), dy = random_floats(sz(N * C), 11);
  auto w = random_floats(sz(C), 12);
  std::vector<int32_t> tokens(sz(N));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7) % V);
  check_thread_count_invariance("layernorm dweight/dbias", [&] {
    std::vector<float> out(x.size()), mean(sz(N)), rstd(sz(N)), g(sz(2 * C));
    be.layernorm_forward(tensor(out, {N, C}), tensor(mean, {N}), tensor(rstd, {N}),
                         tensor(x, {N, C}), tensor(w, {C}), Tensor());
    be.layernorm_backward(Tensor(), Tensor(g.data(), {C}), Tensor(g.data() + C, {C}),
                          tensor(dy, {N, C}), tensor(x, {N, C}), tensor(w, {C}), tensor(mean, {N}),
                          tensor(rstd, {N}));
    return g;
  });
  check_thread_count_invariance("embedding dwte/dwpe", [&] {
    std::vector<float> g(sz((V + 8) * C));
    be.embedding_backward(Tensor(g.data(), {V, C}), Tensor(g.data() + V * C, {8, C}),
                          tensor(dy, {12, 8, C}), tensor(tokens, {12, 8}), 0);
    return g;
  });
  check_thread_count_invariance("matmul dbias", [&] {
    std::vector<float> db(sz(C)), wt(sz(C * C));
    be.matmul_backward(Tensor(), Tensor(), tensor(db, {C}), tensor(dy, {N, C}), tensor(x, {N, C}),
                       tensor(wt, {C, C}));
    return db;
  });
  check_thread_count_invariance("sum_squares", [&] {
    auto big = random_floats(100003, 14);  // several fixed-size reduction chunks
    std::vector<double> s = {be.sum_squares(tensor(big, {int64_t(big.size())}))};
    std::vector<float> bits(2);
    std::memcpy(bits.data(), s.data(), sizeof(double));
    return bits;
  });
}

TEST_CASE("cross_entropy_is_stable_for_large_logits", "[cpu][forward]") {
  const int64_t N = 3, V = 5;
  std::vector<int32_t> targets = {0, 4, 2};
  auto logits = random_floats(sz(N * V), 13, -2, 2), shifted = logits;
  for (float& z : shifted) z += 1000.0f;  // exp(1000) overflows without the max shift
  std::vector<float> l1(sz(N)), l2(sz(N));
  CpuBackend be;
  be.softmax_cross_entropy(tensor(logits, {N, V}), tensor(l1, {N}), tensor(targets, {N}), 1.0f, V);
  be.softmax_cross_entropy(tensor(shifted, {N, V}), tensor(l2, {N}), tensor(targets, {N}), 1.0f, V);
  check_close("losses with +1000 shift", l2, std::vector<double>(l1.begin(), l1.end()), 1e-3, 1e-3);
  check_close("dlogits with +1000 shift", shifted,
              std::vector<double>(logits.begin(), logits.end()), 1e-3, 1e-4);
}

}  // namespace
}  // namespace trainer::cpu::test
