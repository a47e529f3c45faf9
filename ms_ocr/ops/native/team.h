// The decode kernels' thread team. A decode step is ~20 kernel calls of ~1 ms, each with up to nine points where its
// threads wait for each other. libgomp spins only ~100 times at such a point once the process holds more OpenMP
// threads than CPUs (MindSpore launches some kernels from its own threads, each of which gets an OpenMP pool), then
// sleeps in the kernel: measured in a PaddleOCR-VL decode, ~88 sleeps per token per thread, and each DecodeLayer
// 0.3 ms slower than the same layer in a process of its own. The decode kernels (DecodeLayer, the head's MatMulT,
// MoeExperts) therefore run on this team instead: g_threads - 1 workers that spin between jobs for up to kIdleSpin,
// then sleep, and a spinning barrier. The caller is thread 0. A call while the team is busy (another thread's kernel)
// runs alone.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "common.h"

namespace ms_ocr {

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// A waiting team thread spins, then yields its CPU between checks (a partner may have lost its CPU to another
// process: the test suite runs two processes on two cores), and between jobs sleeps after kIdleSpin.
constexpr int kBarrierPauses = 1 << 11;
constexpr auto kIdleSpin = std::chrono::milliseconds(2);  // between jobs: covers a step's host work

template <typename Done>
inline void spin_until(Done done) {
  for (int i = 0; !done(); ++i) {
    if (i < kBarrierPauses) cpu_pause();
    else std::this_thread::yield();
  }
}

class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void wait() {
    if (n_ <= 1) return;
    const int gen = gen_.load(std::memory_order_acquire);
    if (count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
      count_.store(0, std::memory_order_relaxed);
      gen_.fetch_add(1, std::memory_order_release);
      return;
    }
    spin_until([&] { return gen_.load(std::memory_order_acquire) != gen; });
  }

 private:
  const int n_;
  std::atomic<int> count_{0}, gen_{0};
};

// A job's view of the team: this thread's index, the team size and the team's barrier.
struct TeamCtx {
  int tid, n;
  SpinBarrier* barrier;
  void sync() const { barrier->wait(); }
};

class SpinTeam {
 public:
  using Fn = void (*)(void*, const TeamCtx&);

  explicit SpinTeam(int size) : size_(size) {}

  static void start(const std::shared_ptr<SpinTeam>& team);  // its workers, threads 1 .. size - 1

  void stop() {
    stop_.store(true);
    epoch_.fetch_add(1);
    std::lock_guard<std::mutex> lk(m_);
    cv_.notify_all();
  }

  int size() const { return size_; }

  // Runs fn(ctx, team context) on min(n, size) threads (the caller is thread 0); false, without running it,
  // when another caller holds the team.
  bool run(int n, Fn fn, void* ctx) {
    if (busy_.exchange(true, std::memory_order_acquire)) return false;
    SpinBarrier barrier(n < size_ ? n : size_);
    fn_ = fn;
    ctx_ = ctx;
    barrier_ = &barrier;
    job_n_ = n < size_ ? n : size_;
    pending_.store(size_ - 1, std::memory_order_relaxed);
    epoch_.fetch_add(1);  // seq_cst: ordered before the sleepers_ load below (see work())
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lk(m_);
      cv_.notify_all();
    }
    fn(ctx, TeamCtx{0, job_n_, &barrier});
    spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; });
    busy_.store(false, std::memory_order_release);
    return true;
  }

 private:
  static void work(std::shared_ptr<SpinTeam> t, int tid);

  const int size_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int> pending_{0}, sleepers_{0};
  std::atomic<bool> busy_{false}, stop_{false};
  Fn fn_ = nullptr;
  void* ctx_ = nullptr;
  SpinBarrier* barrier_ = nullptr;
  int job_n_ = 1;
  std::mutex m_;
  std::condition_variable cv_;
};

// The team of g_threads threads (made on first use, or again after the thread count changed). Like MindSpore's
// own runtime, it does not survive a fork: a forked child must not run kernels.
std::shared_ptr<SpinTeam> decode_team();

// Runs f(const TeamCtx&) on up to n threads of the decode team (alone when n is 1 or the team is busy).
template <typename F>
void team_run(int n, F&& f) {
  if (n > 1) {
    const auto team = decode_team();
    if (team->size() > 1 &&
        team->run(n, [](void* c, const TeamCtx& t) { (*static_cast<F*>(c))(t); }, &f))
      return;
  }
  SpinBarrier alone(1);
  f(TeamCtx{0, 1, &alone});
}

// Rows [0, out) of a product run over the team as rows(o, o1), in chunks of `chunk` rows handed out as threads
// ask: the calling thread may be niced below MindSpore's kernel threads (device.lower_launcher_priority), and a
// static split would wait for its half.
template <typename F>
void team_rows(int64_t out, int64_t chunk, F rows) {
  const int64_t chunks = (out + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  team_run(chunks > 1 ? g_threads : 1, [&](const TeamCtx&) {
    for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1))
      rows(c * chunk, (c + 1) * chunk < out ? (c + 1) * chunk : out);
  });
}

// This thread's contiguous share [lo, hi) of `total` elements, shares a multiple of `align`.
inline std::pair<int64_t, int64_t> team_share(int64_t total, int64_t align, const TeamCtx& team) {
  const int64_t share = ((total + team.n - 1) / team.n + align - 1) / align * align;
  const int64_t lo = team.tid * share < total ? team.tid * share : total;
  return {lo, lo + share < total ? lo + share : total};
}

}  // namespace ms_ocr
