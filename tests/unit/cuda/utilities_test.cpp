// AdamW, scale/axpy, release, reductions and bf16 rounding of the cuda backend against the cpu
// backend; its peak device memory and its event timer (profiling).
#include <chrono>
#include <cstring>

#include "tests/unit/cuda/cuda_test_util.h"
#ifdef TRAINER_HAVE_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

using namespace trainer;
using namespace trainer::cuda::test;

#ifdef TRAINER_HAVE_CUDA
// Runs with no device too: which device a rank takes by LOCAL_RANK and the devices it sees.
TEST_CASE("cuda_device_is_local_rank_or_the_one_visible", "[cuda]") {
  CHECK(cuda::device_for_local_rank(0, 8) == 0);
  CHECK(cuda::device_for_local_rank(5, 8) == 5);
  CHECK(cuda::device_for_local_rank(3, 1) == 0);  // srun --gpus-per-task=1: its GPU is device 0
  CHECK_THROWS_WITH(cuda::device_for_local_rank(4, 4),
                    Catch::Contains("LOCAL_RANK 4 but only 4 visible device(s)"));
}
#endif

TEST_CASE("cuda_adamw_scale_axpy_match_cpu", "[cuda]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t n = 3001;
  auto p = randoms(n, 1), g = randoms(n, 2), m = randoms(n, 3, -0.1f, 0.1f),
       v = randoms(n, 4, 0, 0.1f);
  Tensor gp = upload(*gpu, p, {n}), gg = upload(*gpu, g, {n}), gm = upload(*gpu, m, {n}),
         gv = upload(*gpu, v, {n});
  Tensor gcopy =
      upload(*gpu, std::vector<uint16_t>(static_cast<size_t>(n), 0x7fc0), {n}, DType::bf16);
  AdamWParams hp;
  hp.lr = 1e-3f, hp.weight_decay = 0.1f, hp.step = 7;
  gpu->adamw_step(gp, gg, gm, gv, hp, gcopy);  // also writes the bf16 copy of the new params
  std::vector<uint16_t> copy(static_cast<size_t>(n));
  gpu->to_host(copy.data(), gcopy);
  const std::vector<float> stepped = download(*gpu, gp);
  for (size_t i = 0; i < copy.size(); ++i) {
    INFO("bf16 copy element " << i);
    CHECK(copy[i] == cpu::bf16_bits_from_float(stepped[i]));
  }
  gpu->scale(gg, 0.75f);
  gpu->axpy(gp, gg, -0.5f);
  ref.adamw_step(host(p, {n}), host(g, {n}), host(m, {n}), host(v, {n}), hp);
  ref.scale(host(g, {n}), 0.75f);
  ref.axpy(host(p, {n}), host(g, {n}), -0.5f);
  check_close(download(*gpu, gp), p, kF32Tol, "adamw+axpy params");
  check_close(download(*gpu, gm), m, kF32Tol, "adamw m");
  check_close(download(*gpu, gv), v, kF32Tol, "adamw v");
  check_close(download(*gpu, gg), g, kF32Tol, "scale");
}

TEST_CASE("cuda_release_fills_the_range_and_keeps_the_memory", "[cuda]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  const int64_t n = 70'001;
  auto x = randoms(n, 1);
  Tensor gx = upload(*gpu, x, {n});
  gpu->release(gx.slice(5, n - 10), std::nanf(""));  // ZeRO-3's poisoning of a released unit
  const std::vector<float> back = download(*gpu, gx);
  for (int64_t i = 0; i < n; ++i) {
    const bool released = i >= 5 && i < n - 5;
    INFO("element " << i);
    REQUIRE((released ? std::isnan(back[size_t(i)]) : back[size_t(i)] == x[size_t(i)]));
  }
  CHECK(gpu->resident_bytes(gx) == static_cast<int64_t>(gx.nbytes()));  // device memory stays
  // A bf16 range (a unit's weight copy) reads the fill rounded to bf16.
  std::vector<uint16_t> xb(static_cast<size_t>(n), 0x3f80);
  Tensor gb = upload(*gpu, xb, {n}, DType::bf16);
  gpu->release(gb.slice(5, n - 10), std::nanf(""));
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  gpu->to_host(bits.data(), gb);
  for (int64_t i = 0; i < n; ++i) {
    const bool released = i >= 5 && i < n - 5;
    INFO("bf16 element " << i);
    REQUIRE((released ? std::isnan(cpu::float_from_bf16_bits(bits[size_t(i)]))
                      : bits[size_t(i)] == 0x3f80));
  }
}

// ZeRO 2 and 3's buffers (alloc_releasable): a released range's whole 2 MiB pages are unmapped
// (resident bytes fall by them; the pool keeps at most one release's worth, held_bytes), its
// ends filled; an acquire maps them again, reading 0, and leaves the bytes around them as they
// were. Freed with pages released, and again allocated.
TEST_CASE("cuda_releasable_buffers_unmap_released_pages_and_map_them_back_zeroed", "[cuda]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  const int64_t n = 3 * (1 << 20) + 12345;  // 12 MiB and a bit of fp32: whole pages inside
  auto x = randoms(n, 4);
  Tensor t(gpu->alloc_releasable(size_t(n) * 4), {n}, DType::f32, DeviceType::cuda);
  gpu->from_host(t, x.data());
  CHECK(gpu->kernels().at("zero_release").find("unmapped in 2 MiB pages") != std::string::npos);
  REQUIRE(gpu->resident_bytes(t) == static_cast<int64_t>(t.nbytes()));
  const int64_t lo = 1001, hi = n - 999, page_floats = (2 << 20) / 4;
  gpu->release(t.slice(lo, hi - lo), std::nanf(""));
  const int64_t resident = gpu->resident_bytes(t);
  INFO("resident bytes " << resident << " of " << t.nbytes());
  CHECK(resident < static_cast<int64_t>(t.nbytes()) - 4 * (2 << 20));  // at least 4 pages went
  CHECK(resident >= static_cast<int64_t>(t.nbytes()) - (hi - lo) * 4);
  // what stayed mapped: the live ends and the filled (NaN) bytes of the partly released pages
  const std::vector<float> head = download(*gpu, t.slice(0, page_floats));
  for (int64_t i = 0; i < page_floats; ++i) {
    INFO("element " << i);
    REQUIRE((i < lo ? head[size_t(i)] == x[size_t(i)] : std::isnan(head[size_t(i)])));
  }
  const std::vector<float> tail = download(*gpu, t.slice(n - 999, 999));
  for (int64_t i = 0; i < 999; ++i) REQUIRE(tail[size_t(i)] == x[size_t(n - 999 + i)]);
  gpu->acquire(t.slice(lo, hi - lo));
  CHECK(gpu->resident_bytes(t) == static_cast<int64_t>(t.nbytes()));
  const std::vector<float> back = download(*gpu, t);
  for (int64_t i = 0; i < n; ++i) {
    INFO("element " << i);
    const bool released = i >= lo && i < hi;
    REQUIRE((released ? (back[size_t(i)] == 0.0f || std::isnan(back[size_t(i)]))
                      : back[size_t(i)] == x[size_t(i)]));
  }
  CHECK(back[size_t(2 * page_floats)] == 0.0f);  // inside an unmapped page: mapped back zeroed
  gpu->release(t.slice(lo, hi - lo), 0.0f);
  gpu->free(t.data);  // with released pages in it
  // Released from the start (ZeRO's gradients): nothing held until acquired, then zeros.
  Tensor g(gpu->alloc_released(size_t(n) * 4), {n}, DType::f32, DeviceType::cuda);
  CHECK(gpu->resident_bytes(g) == 0);
  gpu->acquire(g.slice(n / 2, 1));
  CHECK(gpu->resident_bytes(g) == 2 << 20);  // the one page
  CHECK(download(*gpu, g.slice(n / 2, 1))[0] == 0.0f);
  gpu->free(g.data);
  Tensor again(gpu->alloc_releasable(size_t(n) * 4), {n}, DType::f32, DeviceType::cuda);
  gpu->zero(again);
  CHECK(download(*gpu, again.slice(n / 2, 1))[0] == 0.0f);
  gpu->free(again.data);
}

// The report's peak per rank on cuda is device memory (the arena's), not the host's RSS: it
// grows by at least what a buffer takes, and a freed buffer's memory stays counted.
TEST_CASE("cuda_peak_device_bytes_counts_what_the_arena_took", "[cuda]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  const auto before = gpu->peak_device_bytes();
  REQUIRE(before.has_value());
  const size_t big = size_t{600} << 20;  // more than the arena's 256 MiB chunks
  void* p = gpu->alloc(big);
  const int64_t with = gpu->peak_device_bytes().value();
  CHECK(with >= *before + static_cast<int64_t>(big));
  gpu->free(p);
  CHECK(gpu->peak_device_bytes().value() == with);
}

TEST_CASE("cuda_sum_and_sum_squares_match_cpu_in_fp64", "[cuda]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t n = 1'000'003;
  auto x = randoms(n, 1);
  Tensor gx = upload(*gpu, x, {n});
  const double ss = gpu->sum_squares(gx), want_ss = ref.sum_squares(host(x, {n}));
  const double s = gpu->sum(gx), want_s = ref.sum(host(x, {n}));
  INFO("sum_squares cuda " << ss << " cpu " << want_ss << "; sum cuda " << s << " cpu " << want_s);
  CHECK(std::fabs(ss - want_ss) <= 1e-12 * want_ss);
  CHECK(std::fabs(s - want_s) <= 1e-9 * want_ss);
  CHECK(gpu->sum_squares(gx) == ss);  // deterministic: same bits again
}

TEST_CASE("cuda_round_to_bf16_is_bit_identical_to_cpu", "[cuda]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t n = 4099;
  auto x = randoms(n, 1, -1e4f, 1e4f);
  x[0] = std::nanf(""), x[1] = INFINITY, x[2] = 3.4e38f, x[3] = -0.0f, x[4] = 1e-40f;
  std::vector<float> want(static_cast<size_t>(n));
  ref.round_to_bf16(host(want, {n}), host(x, {n}));
  Tensor gx = upload(*gpu, x, {n}), gy = poisoned(*gpu, {n});
  gpu->round_to_bf16(gy, gx);
  const auto got = download(*gpu, gy);
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && !mismatches++) first = i;
  INFO(mismatches << " bit mismatches; first at [" << first << "]: cuda " << got[first] << " cpu "
                  << want[first] << " (input " << x[first] << ")");
  CHECK(mismatches == 0);
}

TEST_CASE("cuda_event_timer_times_the_stream_without_waiting_for_it", "[cuda]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  const int64_t n = 2048;
  Tensor a = upload(*gpu, randoms(n * n, 1), {n, n}), c = upload(*gpu, randoms(n * n, 2), {n, n});
  Backend::Gemm g;
  g.m = g.n = g.k = n;
  g.a = g.b = static_cast<const float*>(a.data);
  g.c = static_cast<float*>(c.data);
  g.lda = g.ldb = g.ldc = n;
  gpu->gemm(g);  // warm-up: cuBLASLt's plan and the module load stay out of the timing
  gpu->synchronize();
  auto timer = gpu->make_timer();
  timer->mark();
  timer->mark();  // nothing between marks 0 and 1
  const auto host0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) gpu->gemm(g);  // 344 GFLOP of strict fp32
  CHECK(timer->mark() == 2);
  const double host_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - host0).count();
  const std::vector<double> s = timer->seconds();
  REQUIRE(s.size() == 3);
  CHECK(s[0] == 0);
  CHECK(s[1] - s[0] < 0.1 * (s[2] - s[1]));
  INFO("host " << host_s << " s to queue what the device took " << s[2] - s[1] << " s for");
  CHECK(host_s < 0.25 * (s[2] - s[1]));  // marking and queueing did not wait for the GEMMs
  CHECK(timer->mark() == 0);             // the next step's marks reuse the pool
  CHECK(timer->seconds().size() == 1);
}
