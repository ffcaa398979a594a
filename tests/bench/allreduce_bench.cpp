// Gloo all_reduce bandwidth on this machine: N ranks as threads of one process, each with its own
// TcpStore client and GlooComm over loopback TCP (the same code path as N processes), beside a
// plain memcpy of the same size (the single-core memory-bandwidth ceiling).
//   algbw = bytes / time, busbw = algbw * 2(n-1)/n (bytes each rank moves in a ring all_reduce).
// Usage: allreduce_bench [--ranks 2,4] [--min-mib 1] [--max-mib 256]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/comm.h"
#include "runtime/dist/tcp_store.h"

using namespace trainer::dist;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Fewer repetitions for big buffers: about 1 GiB of payload per size, between 2 and 20.
int iterations_for(size_t bytes) {
  return static_cast<int>(std::clamp<size_t>((1024 * kMiB) / bytes, 2, 20));
}

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double memcpy_gbps(size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);  // warm-up: page in both buffers
  int iters = iterations_for(bytes);
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    src[static_cast<size_t>(i) % bytes] = static_cast<char>(i);  // keep the copy observable
    std::memcpy(dst.data(), src.data(), bytes);
  }
  double t = seconds(t0, Clock::now()) / iters;
  if (dst[0] == 42) std::puts("");
  return static_cast<double>(bytes) / t / 1e9;
}

// Seconds per all_reduce of each size for n thread-ranks (rank 0's view, between barriers).
std::map<size_t, double> allreduce_seconds(int n, const std::vector<size_t>& sizes) {
  auto server = std::make_shared<TcpStore>("127.0.0.1", 0, true, std::chrono::seconds(60));
  std::map<size_t, double> out;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto store = make_tcp_store("127.0.0.1", server->port(), false, std::chrono::seconds(60));
      CommOptions opts;
      opts.name = "bench";
      opts.timeout_s = 120;
      auto comm = make_gloo_comm(make_prefix_store(store, "bench"), r, n, opts);
      std::vector<float> buf(sizes.back() / sizeof(float), 1.0f);
      for (size_t bytes : sizes) {
        size_t count = bytes / sizeof(float);
        comm->all_reduce(buf.data(), count, CommDType::f32, ReduceOp::sum);  // warm-up
        int iters = iterations_for(bytes);
        comm->barrier();
        auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i)
          comm->all_reduce(buf.data(), count, CommDType::f32, ReduceOp::sum);
        comm->barrier();
        if (r == 0) out[bytes] = seconds(t0, Clock::now()) / iters;
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

std::vector<int> parse_ranks(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoi(item));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> ranks = {2, 4};
  size_t min_mib = 1, max_mib = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--ranks") ranks = parse_ranks(argv[i + 1]);
    if (a == "--min-mib") min_mib = std::stoul(argv[i + 1]);
    if (a == "--max-mib") max_mib = std::stoul(argv[i + 1]);
  }
  std::vector<size_t> sizes;
  for (size_t m = min_mib; m <= max_mib; m *= 2) sizes.push_back(m * kMiB);

  std::map<int, std::map<size_t, double>> times;
  for (int n : ranks) times[n] = allreduce_seconds(n, sizes);

  std::printf("Gloo all_reduce (f32 sum, loopback TCP, ranks = threads of one process, %u cores)\n",
              std::thread::hardware_concurrency());
  std::printf("%10s %12s", "size", "memcpy GB/s");
  for (int n : ranks) std::printf(" | n=%d algbw  busbw  busbw/memcpy", n);
  std::printf("\n");
  for (size_t bytes : sizes) {
    double copy = memcpy_gbps(bytes);
    std::printf("%7zu MiB %12.2f", bytes / kMiB, copy);
    for (int n : ranks) {
      double alg = static_cast<double>(bytes) / times[n][bytes] / 1e9;
      double bus = alg * 2.0 * (n - 1) / n;
      std::printf(" |    %7.2f %6.2f %13.3f", alg, bus, bus / copy);
    }
    std::printf("\n");
  }
  return 0;
}
