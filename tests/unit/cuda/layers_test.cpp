// Every layer op of the cuda backend against the cpu backend on the same random inputs.
#include <array>
#include <cstdlib>
#include <cstring>

#include "tests/unit/cuda/cuda_test_util.h"
#include "tests/unit/kernels/kernel_test_util.h"

using namespace trainer;
using namespace trainer::cuda::test;

TEST_CASE("cuda_gemm_matches_cpu_for_every_transpose_and_batch", "[cuda]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t M = 37, N = 53, K = 29, batch = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      auto a = randoms(batch * M * K, 1), b = randoms(batch * K * N, 2),
           c = randoms(batch * M * N, 3);
      Backend::Gemm g;
      g.trans_a = ta, g.trans_b = tb, g.m = M, g.n = N, g.k = K, g.alpha = 0.5f, g.beta = 0.25f;
      g.batch = batch, g.stride_a = M * K, g.stride_b = K * N, g.stride_c = M * N;
      Tensor da = upload(*gpu, a, {batch * M * K}), db = upload(*gpu, b, {batch * K * N});
      Tensor dc = upload(*gpu, c, {batch * M * N});
      Backend::Gemm gd = g;
      gd.a = da.f32(), gd.b = db.f32(), gd.c = dc.f32();
      gpu->gemm(gd);
      g.a = a.data(), g.b = b.data(), g.c = c.data();
      ref.gemm(g);
      check_close(download(*gpu, dc), c, kF32Tol,
                  "gemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
    }
}

TEST_CASE("cuda_matmul_forward_and_backward_match_cpu", "[cuda]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t N = 24, C = 40, OC = 72;
  auto x = randoms(N * C, 1), w = randoms(OC * C, 2), bias = randoms(OC, 3),
       dy = randoms(N * OC, 4);
  auto dx = randoms(N * C, 5), dw = randoms(OC * C, 6), db = randoms(OC, 7);
  std::vector<float> y(static_cast<size_t>(N * OC));
  Tensor gx = upload(*gpu, x, {N, C}), gw = upload(*gpu, w, {OC, C}), gb = upload(*gpu, bias, {OC});
  Tensor gy = poisoned(*gpu, {N, OC}), gdy = upload(*gpu, dy, {N, OC});
  // dinp is overwritten (poisoned: an accumulation shows as NaN), dweight and dbias accumulate
  Tensor gdx = poisoned(*gpu, {N, C}), gdw = upload(*gpu, dw, {OC, C}),
         gdb = upload(*gpu, db, {OC});
  gpu->matmul_forward(gy, gx, gw, gb);
  gpu->matmul_backward(gdx, gdw, gdb, gdy, gx, gw);
  ref.matmul_forward(host(y, {N, OC}), host(x, {N, C}), host(w, {OC, C}), host(bias, {OC}));
  ref.matmul_backward(host(dx, {N, C}), host(dw, {OC, C}), host(db, {OC}), host(dy, {N, OC}),
                      host(x, {N, C}), host(w, {OC, C}));
  check_close(download(*gpu, gy), y, kF32Tol, "matmul out");
  check_close(download(*gpu, gdx), dx, kF32Tol, "matmul dinp");
  check_close(download(*gpu, gdw), dw, kF32Tol, "matmul dweight");
  check_close(download(*gpu, gdb), db, kF32Tol, "matmul dbias");

  // the residual add in the GEMM (cuBLASLt's C, beta 1), from its own buffer and in place
  auto res = randoms(N * OC, 8);
  std::vector<float> yr(y.size());
  ref.matmul_forward(host(yr, {N, OC}), host(x, {N, C}), host(w, {OC, C}), host(bias, {OC}),
                     host(res, {N, OC}));
  Tensor gyr = poisoned(*gpu, {N, OC}), gres = upload(*gpu, res, {N, OC});
  gpu->matmul_forward(gyr, gx, gw, gb, gres);
  check_close(download(*gpu, gyr), yr, kF32Tol, "matmul out + residual");
  gpu->matmul_forward(gres, gx, gw, gb, gres);
  check_close(download(*gpu, gres), yr, kF32Tol, "matmul out + residual, in place");
}

TEST_CASE("cuda_layernorm_forward_and_backward_match_cpu", "[cuda]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  // columns fewer than the backward kernel's 256 threads (96) and more (300); 70 rows: 3 blocks of
  // 32, the last partial, in groups of 8; 768 columns (GPT-2's): the kernels that hold rows in
  // registers (arena tensors are 16-byte aligned)
  for (const auto& [N, C] : {std::pair<int64_t, int64_t>{33, 96}, {70, 300}, {70, 768}}) {
    INFO(N << " rows, C " << C);
    auto x = randoms(N * C, 1, -2, 3), w = randoms(C, 2), b = randoms(C, 3), dy = randoms(N * C, 4);
    auto dx = randoms(N * C, 5), dw = randoms(C, 6), db = randoms(C, 7);
    std::vector<float> y(static_cast<size_t>(N * C)), mean(static_cast<size_t>(N)), rstd(mean);
    Tensor gx = upload(*gpu, x, {N, C}), gw = upload(*gpu, w, {C}), gb = upload(*gpu, b, {C});
    Tensor gy = poisoned(*gpu, {N, C}), gm = poisoned(*gpu, {N}), gr = poisoned(*gpu, {N});
    Tensor gdy = upload(*gpu, dy, {N, C}), gdx = upload(*gpu, dx, {N, C});
    Tensor gdw = upload(*gpu, dw, {C}), gdb = upload(*gpu, db, {C});
    gpu->layernorm_forward(gy, gm, gr, gx, gw, gb);
    gpu->layernorm_backward(gdx, gdw, gdb, gdy, gx, gw, gm, gr);
    ref.layernorm_forward(host(y, {N, C}), host(mean, {N}), host(rstd, {N}), host(x, {N, C}),
                          host(w, {C}), host(b, {C}));
    ref.layernorm_backward(host(dx, {N, C}), host(dw, {C}), host(db, {C}), host(dy, {N, C}),
                           host(x, {N, C}), host(w, {C}), host(mean, {N}), host(rstd, {N}));
    check_close(download(*gpu, gy), y, kF32Tol, "layernorm out");
    check_close(download(*gpu, gm), mean, kF32Tol, "layernorm mean");
    check_close(download(*gpu, gr), rstd, kF32Tol, "layernorm rstd");
    check_close(download(*gpu, gdx), dx, kF32Tol, "layernorm dinp");
    check_close(download(*gpu, gdw), dw, kF32Tol, "layernorm dweight");
    check_close(download(*gpu, gdb), db, kF32Tol, "layernorm dbias");
    // dinp_bf16: the new dinp rounded in the same pass, bit for bit
    Tensor gdx16 = poisoned_bf16(*gpu, {N, C});
    gpu->layernorm_backward(gdx, Tensor(), Tensor(), gdy, gx, gw, gm, gr, gdx16);
    std::vector<uint16_t> dx16(static_cast<size_t>(N * C));
    gpu->to_host(dx16.data(), gdx16);
    CHECK(dx16 == bf16_bits_of(download(*gpu, gdx)));
  }
}

TEST_CASE("cuda_gelu_forward_and_backward_match_cpu", "[cuda]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t n = 5000;
  auto x = randoms(n, 1, -5, 5), dy = randoms(n, 2), dx = randoms(n, 3);
  std::vector<float> y(static_cast<size_t>(n));
  Tensor gx = upload(*gpu, x, {n}), gy = poisoned(*gpu, {n}), gdy = upload(*gpu, dy, {n});
  Tensor gdx = upload(*gpu, dx, {n});
  gpu->gelu_forward(gy, gx);
  gpu->gelu_backward(gdx, gx, gdy);
  ref.gelu_forward(host(y, {n}), host(x, {n}));
  ref.gelu_backward(host(dx, {n}), host(x, {n}), host(dy, {n}));
  check_close(download(*gpu, gy), y, kF32Tol, "gelu out");
  check_close(download(*gpu, gdx), dx, kF32Tol, "gelu dinp");
}

// Both kernels (flash: kFlashHeadSizes, state = row lse; reference: any head size, state =
// probabilities) against the cpu reference, over lengths below, at and across the 32-row tiles
// (16 above head size 64).
TEST_CASE("cuda_attention_forward_and_backward_match_cpu", "[cuda]") {
  cpu::CpuBackend ref;
  for (const char* kernel : {"tensor_core", "wmma", "flash", "reference"}) {
    auto gpu = cuda_with_attention(kernel);
    if (!gpu) return;
    for (const auto [B, T, NH, HS] : {std::array<int64_t, 4>{2, 37, 3, 16},
                                      {1, 1, 2, 64},
                                      {2, 64, 2, 64},
                                      {1, 70, 4, 32},
                                      {1, 37, 2, 128},
                                      {1, 20, 2, 80},
                                      {2, 33, 2, 24}}) {
      const int64_t C = NH * HS;
      const std::string at = std::string(" [") + kernel + " B=" + std::to_string(B) +
                             " T=" + std::to_string(T) + " NH=" + std::to_string(NH) +
                             " HS=" + std::to_string(HS) + "]";
      auto qkv = randoms(B * T * 3 * C, 1, -2, 2), dy = randoms(B * T * C, 2),
           dqkv = randoms(B * T * 3 * C, 3);
      std::vector<float> out(static_cast<size_t>(B * T * C)),
          att(static_cast<size_t>(B * NH * T * T));
      const Shape state = gpu->attention_state_shape(B, NH, T, HS);
      // (by the kernel, not the state's size: at T = 1 the T x T probabilities are as large)
      const bool flash = std::string(kernel) != "reference" && HS != 24;
      CHECK(state.numel() == (flash ? B * NH * T : B * NH * T * T));
      Tensor gq = upload(*gpu, qkv, {B, T, 3 * C}), gout = poisoned(*gpu, {B, T, C});
      Tensor gatt = poisoned(*gpu, state), gdy = upload(*gpu, dy, {B, T, C});
      Tensor gdq = poisoned(*gpu, {B, T, 3 * C});  // overwritten, every element
      gpu->attention_forward(gout, gatt, gq, int(NH));
      gpu->attention_backward(gdq, gdy, gq, gout, gatt, int(NH));
      ref.attention_forward(host(out, {B, T, C}), host(att, {B, NH, T, T}),
                            host(qkv, {B, T, 3 * C}), int(NH));
      ref.attention_backward(host(dqkv, {B, T, 3 * C}), host(dy, {B, T, C}),
                             host(qkv, {B, T, 3 * C}), host(out, {B, T, C}),
                             host(att, {B, NH, T, T}), int(NH));
      check_close(download(*gpu, gout), out, kF32Tol, "attention out" + at);
      check_close(download(*gpu, gatt), flash ? kernel_test::lse_float64(qkv, B, T, NH, HS) : att,
                  kF32Tol, (flash ? "attention lse" : "attention att") + at);
      check_close(download(*gpu, gdq), dqkv, kF32Tol, "attention dqkv" + at);
    }
  }
}

TEST_CASE("cuda_flash_attention_backward_is_bitwise_deterministic", "[cuda]") {
  auto gpu = cuda_with_attention("flash");
  if (!gpu) return;
  const int64_t B = 2, T = 100, NH = 2, HS = 64, C = NH * HS;
  auto qkv = randoms(B * T * 3 * C, 4), dy = randoms(B * T * C, 5);
  Tensor gq = upload(*gpu, qkv, {B, T, 3 * C}), gout = poisoned(*gpu, {B, T, C});
  Tensor gatt = poisoned(*gpu, gpu->attention_state_shape(B, NH, T, HS));
  Tensor gdy = upload(*gpu, dy, {B, T, C});
  gpu->attention_forward(gout, gatt, gq, int(NH));
  std::vector<std::vector<float>> runs;
  for (int r = 0; r < 2; ++r) {
    Tensor gdq = poisoned(*gpu, {B, T, 3 * C});
    gpu->attention_backward(gdq, gdy, gq, gout, gatt, int(NH));
    runs.push_back(download(*gpu, gdq));
  }
  CHECK(std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float)) == 0);
}

TEST_CASE("cuda_embedding_forward_and_backward_match_cpu_with_repeated_tokens", "[cuda]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t B = 3, T = 17, C = 40, V = 11, maxT = 24, off = 5;
  std::vector<int32_t> tok(static_cast<size_t>(B * T));
  std::mt19937 gen(9);
  for (auto& t : tok) t = static_cast<int32_t>(gen() % V);
  auto wte = randoms(V * C, 1), wpe = randoms(maxT * C, 2), dy = randoms(B * T * C, 3);
  auto dwte = randoms(V * C, 4), dwpe = randoms(maxT * C, 5);
  std::vector<float> out(static_cast<size_t>(B * T * C));
  Tensor gt = upload(*gpu, tok, {B, T}), gwte = upload(*gpu, wte, {V, C}),
         gwpe = upload(*gpu, wpe, {maxT, C});
  Tensor gout = poisoned(*gpu, {B, T, C}), gdy = upload(*gpu, dy, {B, T, C});
  Tensor gdwte = upload(*gpu, dwte, {V, C}), gdwpe = upload(*gpu, dwpe, {maxT, C});
  gpu->embedding_forward(gout, gt, gwte, gwpe, off);
  gpu->embedding_backward(gdwte, gdwpe, gdy, gt, off);
  ref.embedding_forward(host(out, {B, T, C}), host(tok, {B, T}), host(wte, {V, C}),
                        host(wpe, {maxT, C}), off);
  ref.embedding_backward(host(dwte, {V, C}), host(dwpe, {maxT, C}), host(dy, {B, T, C}),
                         host(tok, {B, T}), off);
  check_close(download(*gpu, gout), out, kF32Tol, "embedding out");
  check_close(download(*gpu, gdwte), dwte, kF32Tol, "embedding dwte");
  check_close(download(*gpu, gdwpe), dwpe, kF32Tol, "embedding dwpe");
}

TEST_CASE("cuda_softmax_cross_entropy_matches_cpu_with_ignored_targets_and_padding", "[cuda]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t N = 19;
  // Rows of V classes, then Vp - V padding columns; 16-byte aligned rows (Vp 300, 384, 5120) are
  // read 16 bytes at a time; V 5003 runs 1024 threads with a tail of 3 columns.
  for (const auto& [V, Vp] :
       {std::pair<int64_t, int64_t>{300, 300}, {300, 384}, {5003, 5003}, {5003, 5120}}) {
    INFO("V " << V << ", row length " << Vp);
    auto logits = randoms(N * Vp, 1, -4, 4);
    std::vector<int32_t> tgt(static_cast<size_t>(N));
    for (size_t i = 0; i < tgt.size(); ++i)
      tgt[i] = i % 7 == 3 ? -1 : static_cast<int32_t>((i * 37) % V);
    std::vector<float> losses(static_cast<size_t>(N));
    Tensor gl = upload(*gpu, logits, {N, Vp}), gloss = poisoned(*gpu, {N}),
           gt = upload(*gpu, tgt, {N});
    gpu->softmax_cross_entropy(gl, gloss, gt, 0.125f, V);
    ref.softmax_cross_entropy(host(logits, {N, Vp}), host(losses, {N}), host(tgt, {N}), 0.125f, V);
    check_close(download(*gpu, gloss), losses, kF32Tol, "cross-entropy losses");
    check_close(download(*gpu, gl), logits, kF32Tol, "cross-entropy dlogits");
  }
}

// The vocabulary-parallel halves on the device: 4 shards of a padded row (the last with 3 padding
// columns, V 1021 of 1024), every shard's stats gathered in rank order, then every shard's finish.
TEST_CASE("cuda_vocab_parallel_cross_entropy_matches_cpu", "[cuda]") {
  auto gpu = cuda_or_skip();
  if (!gpu) return;
  cpu::CpuBackend ref;
  const int64_t N = 19, V = 1021, Vp = 1024, R = 4, Vl = Vp / R;
  std::vector<int32_t> tgt(static_cast<size_t>(N));
  for (size_t i = 0; i < tgt.size(); ++i)
    tgt[i] = i % 7 == 3 ? -1 : static_cast<int32_t>((i * 131) % V);
  std::vector<std::vector<float>> z(static_cast<size_t>(R));
  std::vector<Tensor> gz;
  std::vector<float> stats(static_cast<size_t>(R * N * 3));
  Tensor gstats = poisoned(*gpu, {R, N, 3}), gt = upload(*gpu, tgt, {N});
  for (int64_t r = 0; r < R; ++r) {
    z[size_t(r)] = randoms(N * Vl, 2 + uint32_t(r), -4, 4);
    gz.push_back(upload(*gpu, z[size_t(r)], {N, Vl}));
    gpu->cross_entropy_shard_stats(gstats.slice(r * N * 3, N * 3).view({N, 3}), gz.back(), gt,
                                   r * Vl, V);
    ref.cross_entropy_shard_stats(host(stats, {R, N, 3}).slice(r * N * 3, N * 3).view({N, 3}),
                                  host(z[size_t(r)], {N, Vl}), host(tgt, {N}), r * Vl, V);
  }
  for (int64_t r = 0; r < R; ++r) {
    INFO("shard " << r);
    std::vector<float> losses(static_cast<size_t>(N));
    Tensor gloss = poisoned(*gpu, {N});
    gpu->cross_entropy_shard_finish(gz[size_t(r)], gloss, gstats, gt, 0.125f, r * Vl, V);
    ref.cross_entropy_shard_finish(host(z[size_t(r)], {N, Vl}), host(losses, {N}),
                                   host(stats, {R, N, 3}), host(tgt, {N}), 0.125f, r * Vl, V);
    check_close(download(*gpu, gloss), losses, kF32Tol, "vocab-parallel losses");
    check_close(download(*gpu, gz[size_t(r)]), z[size_t(r)], kF32Tol, "vocab-parallel dlogits");
  }
}
